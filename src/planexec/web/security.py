"""The console's guard: who may read it (a token), and which requests may change anything (CSRF and Origin).

Owns `Guard`, a pure ASGI middleware in front of every route (pages,
server-sent events, static files, errors alike), `csrf_token` and
`new_token`. A request is let through when it carries the token: in the
query (``?token=``: the first visit from the URL ``planexec serve``
printed; the answer sets an HttpOnly, SameSite=Strict cookie and
redirects to the same page without the token, so it stays out of the
history), in that cookie, or as ``Authorization: Bearer``; otherwise it
gets 401 and reaches no route. A request that may change state (anything
but GET, HEAD and OPTIONS) must also carry the CSRF token (the ``csrf``
form field or the ``X-CSRF-Token`` header: derived from the token, so a
page of another site cannot know it), and an ``Origin`` (when the browser
sends one) that is this server's; else 403. On a loopback bind the
``Host`` must be a loopback name, which stops DNS rebinding. Tokens are
compared in constant time. Imports nothing of planexec.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

__all__ = ["COOKIE", "Guard", "csrf_token", "new_token"]

COOKIE = "planexec_token"
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_MAX_FORM = 2_000_000  # bytes: a plan edited in the page is far smaller

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh random token (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def csrf_token(token: str) -> str:
    """The CSRF token of the console whose access token is `token`: a keyed hash, unknowable without the token."""
    return hmac.new(token.encode(), b"planexec-web-csrf", hashlib.sha256).hexdigest()[:40]


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


class Guard:
    """The ASGI middleware described in the module docstring; `loopback` True checks the Host header."""

    def __init__(self, app: ASGIApp, *, token: str, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.csrf = csrf_token(token)
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let the request through, or answer 401/403 (or the cookie-setting redirect) without reaching a route."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if request.method in _SAFE:
            await self.app(scope, receive, send)
            return
        body, receive = await _buffered(receive)
        if body is None:
            await PlainTextResponse("request body too large", status_code=413)(scope, receive, send)
            return
        problem = self._csrf_problem(request, body)
        if problem is not None:
            await PlainTextResponse(f"forbidden: {problem}", status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        """The answer to a request that may not go on (or the first visit's redirect); None to let it through."""
        if self.loopback and request.url.hostname not in _LOOPBACK_NAMES:
            return PlainTextResponse("forbidden: this console answers only to a loopback host name", status_code=403)
        given = request.query_params.get("token")
        if given is not None:
            if not _same(given, self.token):
                return _unauthorized("the token in the address is not this console's")
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            target = request.url.path + (f"?{rest}" if rest else "")
            answer = RedirectResponse(target, status_code=303)
            answer.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
            return answer
        bearer = request.headers.get("authorization", "")
        if _same(request.cookies.get(COOKIE), self.token):
            return None
        if bearer.lower().startswith("bearer ") and _same(bearer[7:].strip(), self.token):
            return None
        return _unauthorized("open the address planexec serve printed (it carries the token), or send Authorization: Bearer TOKEN")

    def _csrf_problem(self, request: Request, body: bytes) -> str | None:
        """Why a state-changing request is refused (a foreign Origin, no or a wrong CSRF token); None when it may go on."""
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return f"the request comes from another origin ({origin})"
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "the request comes from another site"
        sent = request.headers.get("x-csrf-token")
        if sent is None and request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            sent = next(iter(parse_qs(body.decode("utf-8", "replace")).get("csrf", [])), None)
        if not _same(sent, self.csrf):
            return "missing or wrong CSRF token (reload the page and try again)"
        return None


def _unauthorized(why: str) -> Response:
    return PlainTextResponse(f"401 unauthorized: {why}", status_code=401, headers={"WWW-Authenticate": "Bearer"})


async def _buffered(receive: Receive) -> tuple[bytes | None, Receive]:
    """The whole request body (None past the limit) and a `receive` that hands it to the app again."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_FORM:
            return None, receive
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
