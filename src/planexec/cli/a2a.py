"""``planexec a2a``: planexec as an A2A agent that other agents send goals, templates and runs to.

Owns the command's options and its checks before anything is served. It
listens on ``--host`` (default 127.0.0.1; another address needs
``--allow-remote``) and ``--port`` (default 8767; 0: a free one, printed),
serves the agent card at ``/.well-known/agent-card.json`` and JSON-RPC at
``/``, and every call needs the bearer token held by the variable
``--token-env`` names (default ``$PLANEXEC_A2A_TOKEN``), else one made and
printed (a non-loopback host needs one the person chose). ``--url`` is the
address the card gives callers (default: the bound one). The store is
chosen as for every command; the team (planexec.toml's models, tools,
MCP servers and A2A agents, ``--tools``, the built-in roles, the project's
policies) plans and reviews; submissions are recorded under ``--user``.
Approved runs are run by a worker in a thread of this process, or with
``--no-worker`` only by a ``planexec worker`` fleet on the same store.
Imports the ``a2a`` extra lazily with an install hint; the server itself
is `planexec.a2a_server`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from typing import Any

from planexec.cli import _common as common
from planexec.cli.serve import is_loopback

__all__ = ["DEFAULT_PORT", "TOKEN_ENV", "add_a2a_command", "cmd_a2a"]

TOKEN_ENV = "PLANEXEC_A2A_TOKEN"
DEFAULT_PORT = 8767
_INSTALL = "planexec a2a needs the a2a extra: pip install 'planexec[a2a]'"


def add_a2a_command(sub: Any) -> None:
    """Register ``a2a`` on the CLI's subcommands."""
    p = sub.add_parser("a2a", help="serve planexec as an A2A agent: other agents send goals and follow them as tasks; loopback, token")
    p.add_argument("--host", default="127.0.0.1", help="the address (default 127.0.0.1; another needs --allow-remote)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"the port (default {DEFAULT_PORT}; 0: a free one)")
    p.add_argument(
        "--token-env", default=TOKEN_ENV, metavar="VAR", help=f"the variable holding the token every call needs (default {TOKEN_ENV})"
    )
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs a token you chose)")
    p.add_argument("--url", metavar="URL", help="the address the agent card gives callers (default: the bound one)")
    p.add_argument("--name", default="planexec", help="the agent's name on its card (default planexec)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument(
        "--tools", action="append", default=[], metavar="MODULE", help="a tools module for the plans; repeatable; added to planexec.toml's"
    )
    p.add_argument("--user", metavar="NAME", help="the name A2A submissions are recorded under (default: a2a)")
    p.add_argument("--no-worker", action="store_true", help="run no approved run here: leave them to planexec worker on the same store")
    p.set_defaults(command=cmd_a2a)


def cmd_a2a(args: argparse.Namespace) -> int:
    """``planexec a2a``: check the options, build the team over the store, bind, print the address, serve until Ctrl-C."""
    token, made = _token(args)
    try:
        from planexec.a2a_server import build_app, serve
        from planexec.mcp_server.service import Service
    except ImportError:
        raise common.UsageError(_INSTALL) from None
    config = common.config()
    store = common.open_run_store(args.store, config, create=True)
    if os.getcwd() not in sys.path:  # `--tools mytools` finds ./mytools.py, as `python -m` would
        sys.path.insert(0, os.getcwd())
    team = common.face_team(config, store, tools=args.tools)

    def note(line: str) -> None:
        common.say(f"planexec a2a: {line}", stderr=True)

    worker = None if args.no_worker else team.local_worker(on_note=note)
    listening = _listen(args.host, args.port)
    host = args.host.strip("[]")
    shown = f"[{host}]" if ":" in host else host
    url = args.url or f"http://{shown}:{listening.getsockname()[1]}/"
    app = build_app(Service(team, args.user or "a2a", worker), url=url, token=token, name=args.name)
    if worker is not None:
        worker.start()
    try:
        common.say(
            f"planexec A2A agent on {url} · card {url.rstrip('/')}/.well-known/agent-card.json · store {store.location}", stderr=True
        )
        shown_token = token if made else f"the token of ${args.token_env}"
        common.say(f"callers send the header: Authorization: Bearer {shown_token}", stderr=True)
        serve(app, listening)
    finally:
        if worker is not None:
            worker.stop()  # the runs in hand go back to the queue at their next step boundary
    return common.EXIT_OK


def _token(args: argparse.Namespace) -> tuple[str, bool]:
    """The token callers must send and whether it was made here (see the module docstring); `UsageError` when not safe."""
    if not 0 <= args.port <= 65535:
        raise common.UsageError("--port must be between 0 (a free one) and 65535")
    chosen = os.environ.get(args.token_env) or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise common.UsageError(
                f"--host {args.host} is not a loopback address: other machines could reach planexec; add --allow-remote"
            )
        if chosen is None:
            raise common.UsageError(f"an agent reachable from other machines needs a token you chose in ${args.token_env}")
    if chosen is not None and len(chosen) < 16:
        raise common.UsageError(f"the token in ${args.token_env} must be at least 16 characters long")
    return (chosen, False) if chosen is not None else (secrets.token_urlsafe(24), True)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (0: a free one); `UsageError` when the address cannot be had."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family, backlog=128)
    except OSError as exc:
        raise common.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
