"""A trace as a tree of text lines: what ``exporter = "console"`` prints, one tree per run, on stderr.

Owns `render_tree` (finished spans, as the OpenTelemetry SDK hands them to
an exporter, drawn parent above children in the order they started, each
with its duration and the attributes that say the most: tokens, cost,
status, the error) and `TreeExporter`, an exporter by its methods (the
SDK's processors call `export`, `force_flush` and `shutdown`) that keeps a
trace's spans until its local root ends, then prints the tree. Secrets are
redacted from what it prints. Imports `secrets` and `telemetry.names`; no
OpenTelemetry module (the SDK's result codes are read from the spans' own
package when they are asked for).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Sequence
from typing import IO, Any

from planexec.secrets import redact
from planexec.telemetry import names as n

__all__ = ["TreeExporter", "render_tree"]


def render_tree(spans: Iterable[Any]) -> str:
    """The spans drawn as trees (a root per trace, or per span whose parent is not among them), one line per span."""
    spans = sorted(spans, key=lambda s: (s.start_time or 0, s.context.span_id))
    ids = {s.context.span_id for s in spans}
    children: dict[int, list[Any]] = {}
    roots: list[Any] = []
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        if parent is not None and parent in ids:
            children.setdefault(parent, []).append(span)
        else:
            roots.append(span)
    lines: list[str] = []

    def walk(span: Any, lead: str, tail: str) -> None:
        lines.append(lead + label(span))
        kids = children.get(span.context.span_id, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            walk(kid, tail + ("└── " if last else "├── "), tail + ("    " if last else "│   "))

    for root in roots:
        walk(root, "", "")
    return "\n".join(lines)


def label(span: Any) -> str:
    """One span's line: its name, duration and telling attributes."""
    a = span.attributes or {}
    parts = [span.name, _duration(span)]
    if a.get(n.RUN_ID) and a.get(n.OPERATION) == "invoke_workflow":
        parts.append(str(a[n.RUN_ID]))
    if a.get(n.ACTION) and a.get(n.WORKER):
        parts.append(f"{a[n.WORKER]}.{a[n.ACTION]}")
    for key in (n.RUN_STATUS, n.STEP_STATUS):
        if a.get(key):
            parts.append(str(a[key]))
    if n.INPUT_TOKENS in a:
        cached = a.get(n.CACHE_READ_TOKENS) or 0
        parts.append(f"{a[n.INPUT_TOKENS]} in{f' ({cached} cached)' if cached else ''} / {a.get(n.OUTPUT_TOKENS, 0)} out")
    elif a.get(n.USAGE + "model_calls"):
        parts.append(
            f"{a[n.USAGE + 'model_calls']} call(s), {a.get(n.USAGE + 'input_tokens', 0)} in / {a.get(n.USAGE + 'output_tokens', 0)} out"
        )
    if a.get(n.COST):
        parts.append(f"${a[n.COST]:.6f}")
    status = getattr(span.status, "status_code", None)
    if getattr(status, "name", "") == "ERROR":
        why = span.status.description or a.get(n.ERROR_TYPE) or "error"
        parts.append(f"ERROR {str(why)[:120]}")
    return redact("  ".join(parts))


def _duration(span: Any) -> str:
    if span.end_time is None or span.start_time is None:
        return "(open)"
    seconds = (span.end_time - span.start_time) / 1e9
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


class TreeExporter:
    """Prints each run's trace as a tree (`render_tree`) once its local root span ends; to `stream` (default: stderr)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self._traces: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        """Keep the spans; print the trees whose root is among them."""
        done: list[list[Any]] = []
        with self._lock:
            for span in spans:
                trace_id = span.context.trace_id
                self._traces.setdefault(trace_id, []).append(span)
                if span.parent is None or span.parent.is_remote:  # a root here: its trace is complete in this process
                    done.append(self._traces.pop(trace_id))
        for bucket in done:
            self._print(bucket)
        return _success(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is held that could be sent sooner."""
        return True

    def shutdown(self) -> None:
        """Print what is left: spans whose root never ended here."""
        with self._lock:
            left, self._traces = list(self._traces.values()), {}
        for bucket in left:
            self._print(bucket)

    def _print(self, spans: list[Any]) -> None:
        stream = self.stream or sys.stderr
        print(render_tree(spans), file=stream, flush=True)


def _success(spans: Sequence[Any]) -> Any:
    """The SDK's SUCCESS result, from the package that made the spans (imported already when there are spans)."""
    export = sys.modules.get("opentelemetry.sdk.trace.export")
    return export.SpanExportResult.SUCCESS if export is not None else None
