"""How a run id appears in the console's addresses: one path segment, a ``/`` in it written ``%2F``.

Owns `segment` (a run id or step id as it is written in a link), the
``run`` route parameter (`RunIdConvertor`: one segment, decoded) and
`RunPaths`, the ASGI step in front of the console that keeps a ``%2F`` in
the segment after ``/runs/`` from being read as a separator. A sub-team's
run is ``R/step`` and a rollback's ``R/rollback``: without this the server
decodes ``/runs/R%2Fstep`` to ``/runs/R/step`` before any route sees it,
so no sub-run could be opened, and ``/runs/R%2Fedit`` (the sub-run of a
step named ``edit``) would open R's plan editor. Imports nothing from planexec.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["RunIdConvertor", "RunPaths", "segment"]

_PREFIX = b"/runs/"


def segment(value: object) -> str:
    """`value` as one segment of a path: every character but letters, digits and ``_.-~`` percent-encoded (``/`` too)."""
    return quote(str(value), safe="")


class RunIdConvertor(Convertor[str]):
    """The ``{run_id:run}`` route parameter: one segment as `RunPaths` passes it, decoded (``R%2Fstep`` is ``R/step``)."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        """The run id the segment names."""
        return unquote(value)

    def to_string(self, value: str) -> str:
        """The segment a run id is written as."""
        return segment(value)


register_url_convertor("run", RunIdConvertor())


class RunPaths:
    """ASGI middleware: a request under ``/runs/`` is routed on its segment as sent (still encoded), the rest decoded.

    Goes outermost, so every later step (the guard's redirects too) reads
    the path with the run's segment as it was sent. A path that is not
    ASCII as sent (no client sends one) is left as the server decoded it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route the request on the path with its run's segment kept as it was sent."""
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and raw.startswith(_PREFIX):
            head, sep, tail = raw[len(_PREFIX) :].split(b"?", 1)[0].partition(b"/")
            if head.isascii() and tail.isascii():
                rest = f"/{unquote(tail.decode('ascii'))}" if sep else ""
                scope = {**scope, "path": f"/runs/{head.decode('ascii')}{rest}"}
        await self.app(scope, receive, send)
