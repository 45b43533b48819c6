"""Logging in and out of the console (the only console routes open without a session)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field

from lucidgate.gateway.console.auth import COOKIE, ConsoleAuth, check_origin, cookie_secure
from lucidgate.gateway.console.context import REFUSALS, TAG, owner_dependency


class LoginRequest(BaseModel):
    token: str | None = Field(None, max_length=500, description="console.token from the config")
    code: str | None = Field(None, max_length=200, description="a one-time code from `lucid console`")


class SessionInfo(BaseModel):
    csrf: str = Field(description="send as X-CSRF-Token on every POST/PUT/DELETE; keep it in memory only")
    expires_in_s: float


def router(auth: ConsoleAuth) -> APIRouter:
    api = APIRouter(prefix="/api/console", tags=[TAG])
    owner = owner_dependency(auth)

    @api.post("/login", response_model=SessionInfo, summary="Open a console session",
              responses={401: {"description": "Wrong token or an unknown/used/expired code."},
                         403: {"description": "Not sent from this host's page."},
                         429: {"description": "Too many failed attempts from this client; wait a minute "
                                               "(the correct token is never refused)."}})
    async def login(body: LoginRequest, request: Request, response: Response) -> SessionInfo:
        check_origin(request)
        client = request.client.host if request.client is not None else ""
        if not await auth.check_credential(token=body.token, code=body.code, client=client):
            raise HTTPException(401, "that token or login link is not valid (links work once, for minutes)")
        sid, session = auth.open_session()
        response.set_cookie(COOKIE, sid, max_age=int(auth.ttl_s), httponly=True, samesite="strict",
                            secure=cookie_secure(request), path="/")
        return SessionInfo(csrf=session.csrf, expires_in_s=session.expires_at - auth.clock())

    @api.post("/logout", status_code=204, summary="Close this console session", responses=REFUSALS,
              dependencies=[owner])
    async def logout(request: Request) -> Response:
        auth.close_session(request.cookies.get(COOKIE))
        response = Response(status_code=204)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=cookie_secure(request))
        return response

    @api.get("/me", response_model=SessionInfo, summary="This session's CSRF token and lifetime",
             responses=REFUSALS)
    async def me(request: Request) -> SessionInfo:
        session = auth.require(request)
        return SessionInfo(csrf=session.csrf, expires_in_s=session.expires_at - auth.clock())

    return api
