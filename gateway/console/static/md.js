// A small, safe markdown renderer: it builds DOM nodes and text nodes only, so nothing
// in a memory file or a reply can become markup or script. Covers what the assistant
// writes: headings, paragraphs, lists, quotes, fenced code, rules, `code`, **bold**,
// *emphasis* and [links](https://…) (http, https and mailto only). As in a chat app, a
// newline inside a paragraph is a line break (command replies are one item per line).

import { h } from "./dom.js";

const SAFE_URL = /^(https?:|mailto:)/i;

export function renderInline(text) {
  const out = [];
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(__[^_]+__)|(\*[^*\s][^*]*\*)|(_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) out.push(text.slice(last, match.index));
    const token = match[0];
    if (match[1]) out.push(h("code", {}, token.slice(1, -1)));
    else if (match[2] || match[3]) out.push(h("strong", {}, renderInline(token.slice(2, -2))));
    else if (match[4] || match[5]) out.push(h("em", {}, renderInline(token.slice(1, -1))));
    else {
      const close = token.indexOf("](");
      const label = token.slice(1, close);
      const url = token.slice(close + 2, -1);
      out.push(SAFE_URL.test(url) ? h("a", { href: url, rel: "noopener noreferrer", target: "_blank" }, label) : token);
    }
    last = match.index + token.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

export function renderMarkdown(source) {
  const root = h("div", { class: "md" });
  const lines = String(source || "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  let paragraph = [];
  const flush = () => {
    if (paragraph.length) root.append(h("p", {}, paragraph.flatMap((line, n) => n ? [h("br"), ...renderInline(line)] : renderInline(line))));
    paragraph = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)/);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      root.append(h("pre", {}, h("code", {}, body.join("\n"))));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      root.append(h(`h${Math.min(6, heading[1].length + 1)}`, {}, renderInline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      root.append(h("hr"));
      i += 1;
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      root.append(h("blockquote", {}, renderMarkdown(quoted.join("\n"))));
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!m) {
          if (/^\s{2,}\S/.test(lines[i]) && list.lastChild) {
            list.lastChild.append(" ", ...renderInline(lines[i].trim()));
            i += 1;
            continue;
          }
          break;
        }
        const box = m[2].match(/^\[([ xX])\]\s+(.*)$/);
        list.append(h("li", {}, box ? [box[1] === " " ? "☐ " : "☑ ", renderInline(box[2])] : renderInline(m[2])));
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (!line.trim()) {
      flush();
      i += 1;
      continue;
    }
    paragraph.push(line.trim());
    i += 1;
  }
  flush();
  return root;
}
