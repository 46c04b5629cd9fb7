"""The A2A server: the agent card, JSON-RPC at ``/`` behind a bearer token, served by uvicorn on a bound socket.

Owns `build_app` (a Starlette app: the card at
``/.well-known/agent-card.json``, open to anyone who can reach the server,
as the protocol expects a card to be; every JSON-RPC call behind
`BearerToken`; the SDK's request handler over a `RunExecutor`, its tasks
kept in memory: the runs themselves are the store's) and `serve` (uvicorn
on a socket the CLI bound, until Ctrl-C). A request without the token, or
with another, is answered 401 with a JSON-RPC error saying so. Imports the
a2a SDK and Starlette (the ``a2a`` extra), uvicorn, and the face's `card`
and `executor`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from planexec.a2a_server.card import agent_card
from planexec.a2a_server.executor import POLL, RunExecutor
from planexec.mcp_server.service import Service

__all__ = ["AUTH_ERROR", "BearerToken", "build_app", "serve"]

AUTH_ERROR = -32001  # a JSON-RPC server error: the request lacks the server's token


class BearerToken:
    """An ASGI app that lets an HTTP request reach `app` only with ``Authorization: Bearer TOKEN``, the card aside."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token of an HTTP request but the card's; pass everything else (the lifespan) through."""
        if scope["type"] == "http" and scope.get("path") != AGENT_CARD_WELL_KNOWN_PATH:
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                said = "planexec a2a: this server needs its token: Authorization: Bearer TOKEN (wrong or missing)"
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": AUTH_ERROR, "message": said}}
                refused = Response(json.dumps(body), status_code=401, media_type="application/json", headers={"WWW-Authenticate": "Bearer"})
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(service: Service, *, url: str, token: str, name: str = "planexec", poll: float = POLL) -> BearerToken:
    """The server's ASGI app for a server reachable at `url`; every call but the card's needs `token`."""
    card = agent_card(url, name=name)
    handler = DefaultRequestHandler(agent_executor=RunExecutor(service, poll=poll), task_store=InMemoryTaskStore(), agent_card=card)
    routes: list[Any] = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # the tasks in flight end; their runs go on in the store

    return BearerToken(Starlette(routes=routes, lifespan=lifespan), token)


def serve(app: ASGIApp, listening: socket.socket) -> None:
    """Serve `app` on the bound socket `listening` until Ctrl-C."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False)
    uvicorn.Server(config).run(sockets=[listening])
