// The console's calls to /api/console. The CSRF token lives in this module's memory only.
// With several agents every call names the one picked (`agent=`); with one, none is sent.

let csrf = null;
let agent = null;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function setCsrf(token) {
  csrf = token;
}

export function setAgent(id) {
  agent = id || null;
}

export function currentAgent() {
  return agent;
}

// `url` with the picked agent added to its query (unchanged without one).
export function withAgent(url) {
  if (!agent) return url;
  return `${url}${url.includes("?") ? "&" : "?"}agent=${encodeURIComponent(agent)}`;
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const scoped = path === "/login" || path === "/logout" || path === "/me" || path === "/agents" ? path : withAgent(path);
  const response = await fetch(`/api/console${scoped}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const detail = data && data.detail;
    const text = typeof detail === "string" ? detail : `HTTP ${response.status}`;
    if (response.status === 401 && path !== "/login") window.dispatchEvent(new CustomEvent("lucid:logged-out"));
    throw new ApiError(response.status, text);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body = {}) => api("POST", path, body);
export const put = (path, body) => api("PUT", path, body);
export const del = (path) => api("DELETE", path);
