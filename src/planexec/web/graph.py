"""The pictures of a run, drawn on the server as SVG: the plan's DAG and the steps' timeline (Gantt).

Owns `plan_svg` (steps in columns by dependency depth, edges from each
dependency to its dependant, each node coloured by its step's state through
a CSS class) and `timeline_svg` (one bar per step that started, from its
start to its finish, on a time axis from the run's start: bars that overlap
ran in parallel). No JavaScript graph library and no layout engine: a
layered layout by depth is enough for plans of tens of steps, and the page
ships nothing it did not make. Every text is escaped. Imports `plan` and
the engine's result records only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from planexec import Plan, StepRecord

__all__ = ["depths", "plan_svg", "timeline_svg"]

_W, _H, _GAP_X, _GAP_Y, _PAD = 168, 48, 56, 18, 12


def depths(plan: Plan) -> dict[str, int]:
    """Each step's column: 0 for a step with no dependency, else one more than its deepest dependency."""
    ids = set(plan.step_ids)  # (a list, built by each read of `step_ids`: read once)
    deps = {s.step_id: [d for d in s.dependencies if d in ids] for s in plan.steps}
    found: dict[str, int] = {}

    def depth(sid: str, seen: frozenset[str]) -> int:
        if sid in found:
            return found[sid]
        if sid in seen:  # a cycle (an invalid plan): draw it rather than fail
            return 0
        found[sid] = value = 1 + max((depth(d, seen | {sid}) for d in deps[sid]), default=-1)
        return value

    for s in plan.steps:
        depth(s.step_id, frozenset())
    return found


def plan_svg(plan: Plan, states: dict[str, str], *, notes: dict[str, str] | None = None) -> str:
    """The plan as an SVG graph; `states` maps step ids to their state (``pending`` when absent); `notes` a short line a
    node shows instead of its bare state (a scheduled step's time)."""
    notes = notes or {}
    column = depths(plan)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for s in plan.steps:
        c = column[s.step_id]
        r = rows.get(c, 0)
        rows[c] = r + 1
        place[s.step_id] = (_PAD + c * (_W + _GAP_X), _PAD + r * (_H + _GAP_Y))
    width = _PAD * 2 + (max(column.values(), default=0) + 1) * (_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + max(rows.values(), default=1) * (_H + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-labelledby="dag-title"><title id="dag-title">plan {escape(plan.plan_id)} v{plan.version}: '
        f"{len(plan.steps)} steps, arrows from each step to the steps that depend on it</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>',
    ]
    for s in plan.steps:
        x2, y2 = place[s.step_id]
        for d in s.dependencies:
            if d not in place:
                continue
            x1, y1 = place[d]
            ax, ay, bx, by = x1 + _W, y1 + _H // 2, x2, y2 + _H // 2
            mid = (ax + bx) / 2
            parts.append(f'<path class="edge" d="M{ax},{ay} C{mid},{ay} {mid},{by} {bx},{by}" marker-end="url(#arrow)"/>')
    for s in plan.steps:
        x, y = place[s.step_id]
        state = states.get(s.step_id, "pending")
        sid = escape(s.step_id)
        what = escape(f"{s.worker}.{s.action}")
        gate = " 🔒" if s.requires_approval else ""
        note = notes.get(s.step_id, "")
        shown = f"{state} {note}" if note else state
        parts.append(
            f'<a href="#step-{sid}" class="node-link"><g class="node state-{escape(state)}" id="node-{sid}" data-step="{sid}" '
            f'data-state="{escape(state)}"><title>{sid}: {escape(shown)} ({what})</title>'
            f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="8"/>'
            f'<text x="{x + 10}" y="{y + 19}" class="node-id">{escape(_clip(s.step_id, 20))}{gate}</text>'
            f'<text x="{x + 10}" y="{y + 37}" class="node-state">{escape(_clip(shown, 24))}</text></g></a>'
        )
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(records: dict[str, StepRecord], started_at: datetime | None, *, now: datetime | None = None) -> str:
    """One bar per step that started, on a time axis from the first step's start (its offset from the run's `started_at` is written);
    a step still running ends at `now`. Empty when none started."""
    ran = [(sid, r) for sid, r in records.items() if r.started_at is not None]
    waiting = [(sid, r.due) for sid, r in records.items() if r.started_at is None and r.state.value == "scheduled" and r.due is not None]
    if (not ran and not waiting) or started_at is None:
        return ""
    if not ran:  # nothing ran yet: the rows say what waits, and until when
        return _waiting_svg(waiting)
    # the axis starts with the first step, not the run: a plan that waited for approval would squeeze every bar to the right
    t0 = min(r.started_at for _, r in ran if r.started_at is not None)
    lead = (t0 - started_at).total_seconds()
    end = max((r.finished_at or now or r.started_at or t0) for _, r in ran)
    span = max((end - t0).total_seconds(), 0.001)
    label_w, bar_w, row_h = 150, 560, 26
    height = 30 + row_h * (len(ran) + len(waiting))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gantt" viewBox="0 0 {label_w + bar_w + 20} {height}" '
        f'width="{label_w + bar_w + 20}" height="{height}" role="img" aria-labelledby="gantt-title">'
        f'<title id="gantt-title">timeline: when each step ran, over {span:.3f}s; overlapping bars ran in parallel</title>',
        f'<text x="{label_w}" y="14" class="axis">first step (+{lead:.3f}s into the run)</text>',
        f'<text x="{label_w + bar_w}" y="14" class="axis" text-anchor="end">+{span:.3f}s</text>',
    ]
    for i, (sid, r) in enumerate(sorted(ran, key=lambda item: item[1].started_at or t0)):
        assert r.started_at is not None
        a = (r.started_at - t0).total_seconds()
        b = ((r.finished_at or now or r.started_at) - t0).total_seconds()
        x = label_w + bar_w * a / span
        w = max(bar_w * (b - a) / span, 2.0)
        y = 22 + i * row_h
        state = escape(r.state.value)
        parts.append(
            f'<g class="bar state-{state}"><title>{escape(sid)}: {state}, +{a:.3f}s to +{b:.3f}s</title>'
            f'<text x="0" y="{y + 14}" class="bar-label">{escape(_clip(sid, 22))}</text>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 8}" rx="3"/></g>'
        )
    for j, (sid, due) in enumerate(waiting):  # scheduled steps: no bar yet, their time written where a bar would start
        y = 22 + (len(ran) + j) * row_h
        parts.append(_waiting_row(sid, due, label_w, y))
    parts.append("</svg>")
    return "".join(parts)


def _waiting_row(sid: str, due: datetime, x: int, y: int) -> str:
    when = f"{due.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    return (
        f'<g class="bar state-scheduled"><title>{escape(sid)}: scheduled, waits until {when}</title>'
        f'<text x="0" y="{y + 14}" class="bar-label">{escape(_clip(sid, 22))}</text>'
        f'<text x="{x}" y="{y + 14}" class="bar-note">⏲ waits until {when}</text></g>'
    )


def _waiting_svg(waiting: list[tuple[str, datetime]]) -> str:
    label_w, row_h = 150, 26
    height = 30 + row_h * len(waiting)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gantt" viewBox="0 0 {label_w + 580} {height}" width="{label_w + 580}" '
        f'height="{height}" role="img" aria-labelledby="gantt-title"><title id="gantt-title">timeline: no step ran yet; '
        f"{len(waiting)} wait for their time</title>",
    ]
    parts += [_waiting_row(sid, due, label_w, 22 + i * row_h) for i, (sid, due) in enumerate(waiting)]
    parts.append("</svg>")
    return "".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
