"""``planexec mcp``: planexec as an MCP server for other agents and editors, over stdio or streamable HTTP.

Owns the command's options and its checks before anything is served. Over
stdio (the default) the client starts the command and speaks on its stdin
and stdout. With ``--http`` it listens on ``--host`` (default 127.0.0.1;
another address needs ``--allow-remote``) and ``--port`` (default 8766; 0:
a free one, printed), at ``/mcp``, and every request needs the token: the
first of ``--token`` and ``$PLANEXEC_MCP_TOKEN``, else one made and printed
(a non-loopback host needs one the person chose). The store is chosen as
for every command (``--store``, ``$PLANEXEC_STORE``, planexec.toml,
``.planexec/runs.db``); the team (planexec.toml's models, tools and
``--tools``, the built-in roles, the project's policies) plans and reviews.
Decisions a person makes through the client are recorded under ``--user``
(default: your user name); ``--no-decide`` refuses them all. Approved runs
are run by a worker in a thread of this process (`planexec.fleet.local`),
or with ``--no-worker`` only by a ``planexec worker`` fleet on the same
store; a run in hand when the server stops is handed back to the queue at
its next step boundary, and the next worker goes on with it. Imports the
``mcp`` extra lazily with an install hint; the server itself is
`planexec.mcp_server`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import sys
from typing import Any

from planexec import Team
from planexec.cli import _common as common
from planexec.cli.serve import is_loopback
from planexec.config import Config
from planexec.store import RunStore

__all__ = ["DEFAULT_PORT", "TOKEN_ENV", "add_mcp_command", "cmd_mcp"]

TOKEN_ENV = "PLANEXEC_MCP_TOKEN"
DEFAULT_PORT = 8766
_INSTALL = "planexec mcp needs the mcp extra: pip install 'planexec[mcp]'"


def add_mcp_command(sub: Any) -> None:
    """Register ``mcp`` on the CLI's subcommands."""
    p = sub.add_parser("mcp", help="serve planexec to MCP clients (agents, editors): plan, run, follow runs; stdio, or --http on loopback")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --http: the address (default 127.0.0.1; another needs --allow-remote)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"with --http: the port (default {DEFAULT_PORT}; 0: a free one)"
    )
    p.add_argument(
        "--token", metavar="T", help=f"with --http: the token every request needs (default: ${TOKEN_ENV}, else a new one, printed)"
    )
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs a token you chose)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument(
        "--tools", action="append", default=[], metavar="MODULE", help="a tools module for the plans; repeatable; added to planexec.toml's"
    )
    p.add_argument("--user", metavar="NAME", help="the name a person's decisions through the client are recorded under (default: yours)")
    p.add_argument("--no-decide", action="store_true", help="refuse every decision through the client: people decide with planexec approve")
    p.add_argument("--no-worker", action="store_true", help="run no approved run here: leave them to planexec worker on the same store")
    p.set_defaults(command=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    """``planexec mcp``: check the options, build the team over the store, serve until the client leaves (or Ctrl-C)."""
    token, made = _token(args) if args.http else (None, False)
    try:
        from planexec.mcp_server import Service, build_server, serve_http, serve_stdio
    except ImportError:
        raise common.UsageError(_INSTALL) from None
    config = common.config()
    store = common.open_run_store(args.store, config, create=True)
    with contextlib.redirect_stdout(sys.stderr):  # over stdio, stdout is the protocol's: a tools module that prints must not break it
        team = _team(args, config, store)

    def note(line: str) -> None:
        common.say(f"planexec mcp: {line}", stderr=True)

    worker = None if args.no_worker else team.local_worker(on_note=note)
    server = build_server(Service(team, args.user or common.user(), worker), decide=not args.no_decide)
    if worker is not None:
        worker.start()
    try:
        if token is None:
            serve_stdio(server)
        else:
            listening = _listen(args.host, args.port)
            host = args.host.strip("[]")
            shown = f"[{host}]" if ":" in host else host
            common.say(f"planexec MCP server on http://{shown}:{listening.getsockname()[1]}/mcp · store {store.location}", stderr=True)
            shown_token = token if made else f"the token of --token or ${TOKEN_ENV}"
            common.say(f"clients send the header: Authorization: Bearer {shown_token}", stderr=True)
            serve_http(server, listening, host=args.host, token=token)
    finally:
        if worker is not None:
            worker.stop()  # the runs in hand go back to the queue at their next step boundary
    return common.EXIT_OK


def _token(args: argparse.Namespace) -> tuple[str, bool]:
    """The token HTTP clients must send and whether it was made here (see the module docstring); `UsageError` when not safe."""
    if not 0 <= args.port <= 65535:
        raise common.UsageError("--port must be between 0 (a free one) and 65535")
    chosen = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise common.UsageError(
                f"--host {args.host} is not a loopback address: other machines could reach planexec; add --allow-remote"
            )
        if chosen is None:
            raise common.UsageError(f"a server reachable from other machines needs a token you chose: --token T or ${TOKEN_ENV}")
    if chosen is not None and len(chosen) < 16:
        raise common.UsageError("the token must be at least 16 characters long")
    return (chosen, False) if chosen is not None else (secrets.token_urlsafe(24), True)


def _team(args: argparse.Namespace, config: Config, store: RunStore) -> Team:
    """The team that plans and reviews: planexec.toml's models and tools, ``--tools``, the built-in roles, the project's policies."""
    if os.getcwd() not in sys.path:  # `--tools mytools` finds ./mytools.py, as `python -m` would
        sys.path.insert(0, os.getcwd())
    return common.face_team(config, store, tools=args.tools)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (0: a free one); `UsageError` when the address cannot be had."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family, backlog=128)
    except OSError as exc:
        raise common.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
