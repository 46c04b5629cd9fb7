"""``planexec serve``: the web console over the run store, on this machine only unless told otherwise.

Owns the command's options and its safety checks before anything
listens: the host is loopback unless ``--allow-remote`` says otherwise,
and a non-loopback bind also needs a token chosen by the person, never a
printed one. The token is the first of ``--token``, ``$PLANEXEC_WEB_TOKEN``,
the variable ``[planexec.serve] token_env`` names, and ``token`` in
planexec.toml (a secret kept in a file: a warning when the file is
readable by other users); without one, one is made and printed inside
the address to open (a chosen token is not printed: the address names
where it comes from). ``--port`` (else planexec.toml's ``port``, else 8765)
may be 0: the command binds the socket itself and prints the port it got.
Decisions are recorded under ``--user`` (else planexec.toml's ``user``,
else the OS user). The store is chosen as for every command (``--store``,
``$PLANEXEC_STORE``, planexec.toml, ``.planexec/runs.db``) and only read,
except for what a person decides, edits or starts; the project's policies
(planexec.toml) are shown reviewing a waiting plan. Work started in the
console is planned and reviewed by the project's team (`common.face_team`)
and submitted to the store's queue; the console's own worker runs
approved runs (``--no-worker``: a ``planexec worker`` fleet does). Imports the ``web``
extra lazily with an install hint; the console itself is `planexec.web`.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import stat
from pathlib import Path
from typing import Any

from planexec.cli import _common as common
from planexec.config import CONFIG_FILE, Config
from planexec.errors import PolicyError, StoreError
from planexec.policies import load_policies
from planexec.store import store_target

__all__ = ["add_serve_command", "cmd_serve", "is_loopback"]

TOKEN_ENV = "PLANEXEC_WEB_TOKEN"
DEFAULT_PORT = 8765
_INSTALL = "the web console needs the web extra: pip install 'planexec[web]'"


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on the CLI's subcommands."""
    p = sub.add_parser(
        "serve", help="the web console: follow runs live, start work, review, edit and approve plans (loopback only by default)"
    )
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; another needs --allow-remote)")
    p.add_argument(
        "--port", type=int, default=None, metavar="N", help=f"the port (default: planexec.toml, else {DEFAULT_PORT}; 0: a free one)"
    )
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument("--token", metavar="T", help=f"the access token (default: ${TOKEN_ENV}, planexec.toml, else a new one, printed)")
    p.add_argument("--user", metavar="NAME", help="the name decisions are recorded under (default: planexec.toml, else your user name)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs a token you chose)")
    p.add_argument("--no-worker", action="store_true", help="run no approved run here: leave them to planexec worker on the same store")
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
    """``planexec serve``: check the options, bind, print the address with its token, serve until Ctrl-C."""
    config = common.config()
    port = args.port if args.port is not None else config.serve.port if config.serve.port is not None else DEFAULT_PORT
    if not 0 <= port <= 65535:
        raise common.UsageError("--port must be between 0 (a free one) and 65535")
    token, source = _token(args, config)
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        raise common.UsageError(f"--host {args.host} is not a loopback address: other machines could reach the console; add --allow-remote")
    if not loopback and token is None:
        raise common.UsageError(
            f"a console reachable from other machines needs a token you chose: --token T, ${TOKEN_ENV} or [planexec.serve] token_env"
        )
    if token is not None and len(token) < 16:
        raise common.UsageError("the token must be at least 16 characters long")
    try:
        import uvicorn

        from planexec.web import create_app, new_token
    except ImportError:
        raise common.UsageError(_INSTALL) from None
    try:
        target = store_target(args.store, config.store)
        policies = load_policies(config.policies)
    except (StoreError, PolicyError) as exc:
        raise common.UsageError(str(exc)) from None
    token = token or new_token()
    user = args.user or config.serve.user

    def team() -> Any:  # made on first use: a console over a project whose team cannot be made still shows its runs
        try:
            return common.face_team(config, target)
        except common.UsageError as exc:  # said on the start page, beside the form
            raise ValueError(str(exc)) from None

    app = create_app(target, token=token, user=user, loopback=loopback, policies=list(policies), team=team, worker=not args.no_worker)
    listening = _bind(args.host, port)
    bound = listening.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    common.say(f"planexec console on http://{shown}:{bound}/ · store {target}")
    if source is None:  # made here: the address is the only place it is known
        common.say(f"open: http://{shown}:{bound}/?token={token}")
    else:  # a token the person chose stays out of the terminal's scrollback
        common.say(f"open: http://{shown}:{bound}/?token=TOKEN, with the token from {source}")
    common.say("stop with Ctrl-C")
    settings = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False)
    uvicorn.Server(settings).run(sockets=[listening])
    return common.EXIT_OK


def _token(args: argparse.Namespace, config: Config) -> tuple[str | None, str | None]:
    """The access token the person chose (see the module docstring) and where it came from, or (None, None).

    A token kept in planexec.toml that other users can read is used, with a warning.
    """
    if args.token:
        return str(args.token), "--token"
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV], f"${TOKEN_ENV}"
    serve = config.serve
    if serve.token_env is not None:
        value = os.environ.get(serve.token_env)
        if not value:
            raise common.UsageError(f"{CONFIG_FILE} says the token is in ${serve.token_env} ([planexec.serve] token_env), which is not set")
        return value, f"${serve.token_env} ({CONFIG_FILE})"
    if serve.token is not None:
        path = Path(CONFIG_FILE)
        try:
            readable = bool(path.stat().st_mode & (stat.S_IROTH | stat.S_IRGRP))
        except OSError:
            readable = False
        if readable:
            common.say(
                f"warning: {path.resolve()} holds the console's token and other users can read it: "
                f"chmod 600 {path}, or name an environment variable with [planexec.serve] token_env instead",
                stderr=True,
            )
        return serve.token, CONFIG_FILE
    return None, None


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (0: a free port the system picks); `UsageError` when the address is taken."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise common.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
