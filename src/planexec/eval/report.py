"""What an evaluation shows and leaves behind: the terminal tables, the PNG bar chart and the JSON report.

Owns `summary_table` (one row per mode: success rate, model calls, tokens,
cost, wall time, failures by stage), `goals_table` (goal x mode: passed, or
the stage that failed), `write_chart` (grouped bars of success rate, model
calls, tokens and wall time per mode; matplotlib on its Agg backend, so no
display is needed), `write_json` and `write_report` (both files into a
folder). A report that compares planners (`EvalReport.planners`) is shown
by `eval.planner_report` instead: each of these hands it over, so a face
prints and writes either kind the same way. Reads `eval.scoring`'s records
only; runs nothing. Imports `eval.scoring`, `eval.planner_report` and rich;
matplotlib only inside `write_chart`.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from planexec.eval.planner_report import COLORS, planner_goals_table, planner_ratio_notes, planners_table, write_planner_chart
from planexec.eval.scoring import EvalReport

__all__ = [
    "ANCHORS",
    "goals_table",
    "ratio_notes",
    "react_ratios",
    "report_paths",
    "summary_table",
    "write_chart",
    "write_json",
    "write_report",
]

ANCHORS = {
    "tokens": "ReWOO: 5x fewer tokens than ReAct",
    "wall_time": "LLMCompiler: up to 3.7x lower latency than ReAct",
}
"""The published figures our ratios are read against (ReWOO, Xu et al. 2023; LLMCompiler, Kim et al. 2024)."""


def summary_table(report: EvalReport) -> Table:
    """One row per mode: success, model calls, input and output tokens, cost, wall time, failures by stage.

    A comparison of planners: `planner_report.planners_table`.
    """
    if report.planners:
        return planners_table(report)
    title = f"{report.suite}: {len({r.goal_id for r in report.records})} goals x {report.repeat} · model {report.model}"
    if report.latency:
        title += f" · latency {report.latency}"
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("mode", "left"),
        ("success", "right"),
        ("model calls", "right"),
        ("input tokens", "right"),
        ("output tokens", "right"),
        ("cost", "right"),
        ("wall time", "right"),
        ("per goal", "right"),
        ("failures", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]  # rich types justify as a Literal; these are its values
    for s in report.summaries:
        table.add_row(
            s.mode,
            f"{s.successes}/{s.runs} ({s.success_rate:.0%})",
            f"{s.model_calls:,}",
            f"{s.input_tokens:,}",
            f"{s.output_tokens:,}",
            s.cost,
            f"{s.wall_time:.2f} s",
            f"{s.mean_wall_time:.2f} s",
            s.describe_failures(),
        )
    return table


def goals_table(report: EvalReport) -> Table:
    """Goal x mode: ``ok`` or the failed stage, with model calls and wall time (the first repeat only).

    A comparison of planners: `planner_report.planner_goals_table`.
    """
    if report.planners:
        return planner_goals_table(report)
    table = Table(title=f"{report.suite}: per goal (repeat 1)", title_justify="left")
    table.add_column("goal")
    for mode in report.modes:
        table.add_column(mode)
    by_goal: dict[str, dict[str, str]] = {}
    for r in report.records:
        if r.repeat != 1:
            continue
        mark = "ok" if r.success else f"FAIL {r.stage}"
        by_goal.setdefault(r.goal_id, {})[r.mode] = f"{mark} · {r.usage.model_calls} calls · {r.wall_time:.2f} s"
    for goal_id, cells in by_goal.items():
        table.add_row(goal_id, *(cells.get(m, "") for m in report.modes))
    return table


def react_ratios(report: EvalReport) -> dict[str, dict[str, float | None]]:
    """ReAct (mode ``single``) over each planning mode, for ``tokens``, ``model_calls`` and ``wall_time``; empty without ``single``."""
    by_mode = {s.mode: s for s in report.summaries}
    react = by_mode.get("single")
    if react is None:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for mode in ("plan", "stream"):
        other = by_mode.get(mode)
        if other is None:
            continue
        pairs = {
            "tokens": (react.input_tokens + react.output_tokens, other.input_tokens + other.output_tokens),
            "model_calls": (react.model_calls, other.model_calls),
            "wall_time": (react.wall_time, other.wall_time),
        }
        out[mode] = {name: (a / b if b else None) for name, (a, b) in pairs.items()}
    return out


def ratio_notes(report: EvalReport) -> list[str]:
    """The closing note: ReAct / each planning mode for tokens, model calls and wall time, beside the published anchors.

    A comparison of planners: ReAct / each planner's runs on the same workers' model (`planner_report.planner_ratio_notes`).
    """

    def shown(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "n/a"

    lines = [
        f"ReAct (single) / {mode}: tokens {shown(r['tokens'])}, model calls {shown(r['model_calls'])}, wall time {shown(r['wall_time'])}"
        for mode, r in react_ratios(report).items()
    ]
    lines = planner_ratio_notes(report) if report.planners else lines
    if lines:
        lines.append(f"published: {ANCHORS['tokens']}; {ANCHORS['wall_time']}")
    return lines


def report_paths(report: EvalReport, outdir: str | Path) -> dict[str, Path]:
    """Where `write_report` puts the files: ``eval-<suite>.json`` and ``eval-<suite>.png`` in `outdir`."""
    folder = Path(outdir)
    return {"json": folder / f"eval-{report.suite}.json", "png": folder / f"eval-{report.suite}.png"}


def write_json(report: EvalReport, path: str | Path) -> Path:
    """The report as JSON: the set-up, every goal x mode record, the per-mode summaries (and per-planner ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.to_json(indent=2) + "\n", encoding="utf-8")
    return path


def write_chart(report: EvalReport, path: str | Path) -> Path:
    """A PNG of grouped bars per mode: success rate, model calls, tokens (in and out) and wall time, per goal on average.

    A comparison of planners: `planner_report.write_planner_chart`.
    """
    if report.planners:
        return write_planner_chart(report, path)
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    summaries = report.summaries
    modes = [s.mode for s in summaries]
    colors = [COLORS.get(m, "#7f7f7f") for m in modes]
    runs = [max(s.runs, 1) for s in summaries]
    panels = [
        ("success rate (%)", [100 * s.success_rate for s in summaries]),
        ("model calls per goal", [s.model_calls / n for s, n in zip(summaries, runs)]),
        ("tokens per goal", None),
        ("wall time per goal (s)", [s.wall_time / n for s, n in zip(summaries, runs)]),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8))
    for ax, (label, values) in zip(axes, panels):
        if values is None:  # tokens: input and output stacked
            inputs = [s.input_tokens / n for s, n in zip(summaries, runs)]
            outputs = [s.output_tokens / n for s, n in zip(summaries, runs)]
            ax.bar(modes, inputs, color=colors, alpha=0.55)
            bars = ax.bar(modes, outputs, bottom=inputs, color=colors, hatch="//", edgecolor="white")
            values = [i + o for i, o in zip(inputs, outputs)]
            keys = [
                Patch(facecolor="#999999", alpha=0.55, label="input"),
                Patch(facecolor="#999999", hatch="//", edgecolor="white", label="output"),
            ]
            ax.legend(handles=keys, fontsize=7, loc="upper right")
        else:
            bars = ax.bar(modes, values, color=colors)
        for bar, value in zip(bars, values):
            ax.annotate(f"{value:,.0f}" if value >= 10 else f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, value),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_title(label, fontsize=10)
        ax.set_ylim(0, max(max(values, default=0) * 1.18, 1e-9))
        ax.tick_params(labelsize=9)
    title = f"planexec eval · {report.suite} · {report.model}"
    if report.latency:
        title += f" · latency {report.latency}"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(report: EvalReport, outdir: str | Path) -> dict[str, Path]:
    """Write the JSON report and the chart into `outdir` (created if missing); their paths by kind."""
    paths = report_paths(report, outdir)
    write_json(report, paths["json"])
    write_chart(report, paths["png"])
    return paths
