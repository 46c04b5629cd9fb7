"""``planexec serve``: the web console over the run store, on this machine only unless told otherwise.

Owns the command's options and its safety checks before anything
listens: the host is loopback unless ``--allow-remote`` says otherwise,
and a non-loopback bind also needs a token chosen by the person
(``--token`` or ``$PLANEXEC_WEB_TOKEN``), never a printed one. Without a
token one is made and printed inside the address to open. Decisions are
recorded under ``--user`` (default: the OS user). The store is chosen as
for every command (``--store``, ``$PLANEXEC_STORE``, planexec.toml,
``.planexec/runs.db``) and only read, except for the approvals a person
decides. Imports the ``web`` extra lazily with an install hint; the
console itself is `planexec.web`.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from planexec.cli import _common as common
from planexec.errors import StoreError
from planexec.store import store_target

__all__ = ["add_serve_command", "cmd_serve"]

TOKEN_ENV = "PLANEXEC_WEB_TOKEN"
_INSTALL = "the web console needs the web extra: pip install 'planexec[web]'"


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on the CLI's subcommands."""
    p = sub.add_parser("serve", help="the web console: follow runs live, review, edit and approve plans (loopback only by default)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; another needs --allow-remote)")
    p.add_argument("--port", type=int, default=8765, metavar="N", help="the port (default 8765)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument("--token", metavar="T", help=f"the access token (default: ${TOKEN_ENV}, else a new one, printed)")
    p.add_argument("--user", metavar="NAME", help="the name decisions are recorded under (default: your user name)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs --token or $" + TOKEN_ENV + ")")
    p.set_defaults(command=cmd_serve)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    """``planexec serve``: check the options, print the address with its token, serve until Ctrl-C."""
    if not 1 <= args.port <= 65535:
        raise common.UsageError("--port must be between 1 and 65535")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        raise common.UsageError(f"--host {args.host} is not a loopback address: other machines could reach the console; add --allow-remote")
    if not loopback and token is None:
        raise common.UsageError(f"a console reachable from other machines needs a token you chose: --token T or ${TOKEN_ENV}")
    if token is not None and len(token) < 16:
        raise common.UsageError("the token must be at least 16 characters long")
    try:
        import uvicorn

        from planexec.web import create_app, new_token
    except ImportError:
        raise common.UsageError(_INSTALL) from None
    try:
        target = store_target(args.store, common.config().store)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    token = token or new_token()
    app = create_app(target, token=token, user=args.user, loopback=loopback)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    common.say(f"planexec console on http://{shown}:{args.port}/ · store {target}")
    common.say(f"open: http://{shown}:{args.port}/?token={token}")
    common.say("stop with Ctrl-C")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, server_header=False)
    return common.EXIT_OK
