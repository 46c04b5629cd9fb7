"""What a comparison of planners shows: its tables, its ratios to the single agent and its PNG chart.

Owns `planners_table` (one row per workers' model for ``single``, then one
per planner x mode: the first draft valid, repairs, success, model calls,
tokens, cost, wall time, failures by stage), `planner_goals_table` (goal x
planner and mode: passed or the stage that failed, with the repairs),
`planner_ratio_notes` (the single agent over each planner's runs, for
tokens, model calls and wall time) and `write_planner_chart` (grouped bars
per planner, a colour per mode; matplotlib on its Agg backend). Reads an
`EvalReport` whose `planners` are set; runs nothing. `eval.report` hands a
comparison to these. Imports `eval.scoring` and rich; matplotlib only
inside `write_planner_chart`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from planexec.eval.scoring import EvalReport, ModeSummary

__all__ = ["COLORS", "planner_goals_table", "planner_ratio_notes", "planners_table", "write_planner_chart"]

COLORS = {"single": "#d62728", "plan": "#1f77b4", "stream": "#2ca02c"}
"""A colour per mode, in every chart."""
_NO_PLANNER = "—"  # the single agent's row: it has no planner


def _matrix(report: EvalReport) -> bool:
    return len(report.worker_models) > 1


def _cost(s: ModeSummary) -> str:
    return "n/a" if s.cost_usd is None else s.cost  # no call had a price: not a cost of 0


def _first_drafts(s: ModeSummary) -> str:
    if s.first_draft_rate is None:
        return "n/a"
    return f"{s.first_draft_valid}/{s.planned_runs} ({s.first_draft_rate:.0%})"


def planners_table(report: EvalReport) -> Table:
    """Per workers' model, a row for ``single`` (planner ``—``: it has none), then one per planner and planning mode.

    ``1st draft ok`` is the runs whose planner's first draft was accepted
    without repair, of those in which it drafted; ``repairs`` the drafts sent
    back; ``n/a`` for the single agent. A cost no price covers is ``n/a``.
    """
    goals = len({r.goal_id for r in report.records})
    title = f"{report.suite}: {goals} goals x {report.repeat} · {len(report.planners)} planners compared · workers {report.model}"
    if report.latency:
        title += f" · latency {report.latency}"
    table = Table(title=title, title_justify="left", pad_edge=False)  # 120 columns (a log, CI) hold it unbroken
    columns = [("planner", "left"), *([("workers", "left")] if _matrix(report) else []), ("mode", "left")]
    columns += [("1st draft ok", "right"), ("repairs", "right"), ("success", "right"), ("model calls", "right")]
    columns += [("tokens in/out", "right"), ("cost", "right"), ("wall time", "right"), ("failures", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]  # rich types justify as a Literal; these are its values
    for s in report.by_planner:
        table.add_row(
            s.planner or _NO_PLANNER,
            *([s.workers or ""] if _matrix(report) else []),
            s.mode,
            _first_drafts(s),
            "n/a" if s.mean_repairs is None else f"{s.repairs}",
            f"{s.successes}/{s.runs} ({s.success_rate:.0%})",
            f"{s.model_calls:,}",
            f"{s.input_tokens:,}/{s.output_tokens:,}",
            _cost(s),
            f"{s.wall_time:.2f} s",
            s.describe_failures(),
        )
    return table


def planner_goals_table(report: EvalReport) -> Table:
    """Goal x (single, each planner and mode): ``ok`` or the failed stage, with the repairs (the first repeat only)."""
    table = Table(title=f"{report.suite}: per goal (repeat 1)", title_justify="left")
    table.add_column("goal")
    columns: list[tuple[str | None, str, str]] = []  # (planner, mode, workers)
    for s in report.by_planner:
        columns.append((s.planner, s.mode, s.workers or ""))
        header = "single" if s.planner is None else f"{s.planner} · {s.mode}"
        table.add_column(f"{header} · {s.workers}" if _matrix(report) else header)
    cells: dict[str, dict[tuple[str | None, str, str], str]] = {}
    for r in report.records:
        if r.repeat != 1:
            continue
        mark = "ok" if r.success else f"FAIL {r.stage}"
        if r.repairs:
            mark += f", {r.repairs} repair{'s' if r.repairs != 1 else ''}"
        cells.setdefault(r.goal_id, {})[(r.planner, r.mode, r.workers)] = mark
    for goal_id, row in cells.items():
        table.add_row(goal_id, *(row.get(c, "") for c in columns))
    return table


def planner_ratio_notes(report: EvalReport) -> list[str]:
    """The single agent (ReAct) over each planner's runs in each mode, on the same workers' model, for tokens, model
    calls and wall time, saying so when the planner's runs succeeded less often (a failed run is cheap); empty without
    ``single``."""

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    single = {s.workers: s for s in report.by_planner if s.planner is None}
    lines = []
    for s in report.by_planner:
        react = single.get(s.workers)
        if s.planner is None or react is None:
            continue
        on = f" on {s.workers}" if _matrix(report) else ""
        short = f" ({s.successes}/{s.runs} succeeded, single {react.successes}/{react.runs})" if s.successes < react.successes else ""
        lines.append(
            f"ReAct (single) / {s.planner} {s.mode}{on}: tokens {ratio(react.input_tokens + react.output_tokens, s.input_tokens + s.output_tokens)}, "
            f"model calls {ratio(react.model_calls, s.model_calls)}, wall time {ratio(react.wall_time, s.wall_time)}{short}"
        )
    return lines


def _groups(report: EvalReport) -> list[tuple[str, list[ModeSummary]]]:
    """The chart's groups of bars: the single agent per workers' model, then each planner (per workers' model)."""
    out: dict[str, list[ModeSummary]] = {}
    for s in report.by_planner:
        name = "single agent" if s.planner is None else s.planner
        out.setdefault(f"{name}\n{s.workers}" if _matrix(report) else name, []).append(s)
    return list(out.items())


def write_planner_chart(report: EvalReport, path: str | Path) -> Path:
    """A PNG of bars grouped by planner, a colour per mode: first drafts valid, repairs per planned run, success rate,
    and model calls, tokens (input and output) and wall time per goal."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = _groups(report)
    panels: list[tuple[str, Callable[[ModeSummary], float | None]]] = [
        ("first draft valid (%)", lambda s: None if s.first_draft_rate is None else 100 * s.first_draft_rate),
        ("repairs per planned run", lambda s: s.mean_repairs),
        ("success rate (%)", lambda s: 100 * s.success_rate),
        ("model calls per goal", lambda s: s.mean_model_calls),
        ("tokens per goal (input, output hatched)", lambda s: s.mean_tokens),
        ("wall time per goal (s)", lambda s: s.mean_wall_time),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(max(12.0, 3.3 * len(groups)), 7))  # wider with more planners
    for ax, (label, value) in zip(axes.flat, panels):
        top = 0.0
        for x, (_, members) in enumerate(groups):
            width = 0.8 / len(members)
            for k, s in enumerate(members):
                v = value(s)
                at = x - 0.4 + width * (k + 0.5)
                if v is None:  # the single agent has no planner: no draft, no repair
                    ax.annotate("n/a", (at, 0), ha="center", va="bottom", fontsize=7, color="#7f7f7f")
                    continue
                if label.startswith("tokens"):
                    n = max(s.runs, 1)
                    ax.bar(at, s.input_tokens / n, width, color=COLORS.get(s.mode, "#7f7f7f"), alpha=0.55)
                    ax.bar(at, s.output_tokens / n, width, bottom=s.input_tokens / n, color=COLORS.get(s.mode, "#7f7f7f"), hatch="//",
                           edgecolor="white")  # fmt: skip
                else:
                    ax.bar(at, v, width, color=COLORS.get(s.mode, "#7f7f7f"))
                ax.annotate(f"{v:,.0f}" if v >= 10 else f"{v:.2f}", (at, v), ha="center", va="bottom", fontsize=7)
                top = max(top, v)
        ax.set_xticks(range(len(groups)), [name for name, _ in groups], fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_ylim(0, max(top * 1.18, 1e-9))
        ax.tick_params(axis="y", labelsize=8)
    modes = [m for m in report.modes if any(s.mode == m for _, members in groups for s in members)]
    fig.legend(handles=[Patch(facecolor=COLORS.get(m, "#7f7f7f"), label=m) for m in modes], loc="upper right", fontsize=8, ncols=len(modes))
    title = f"planexec eval · {report.suite} · planners compared · workers {report.model}"
    if report.latency:
        title += f" · latency {report.latency}"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
