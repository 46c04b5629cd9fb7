"""The store command of the CLI: ``planexec store check``, whether a run store is sound from its file to its audit log.

Owns showing `store.check.check_store`'s report to a person: one line per
check with its figures (the file's pages and free pages; the schema version
and tables; runs, events and records verified) and its time, each problem
(with its run and event seq), the verdict, and for a damaged file how to
repair it. ``--json`` prints the report as one JSON object. Exit codes: 0
healthy; 1 the file and schema are sound but some run's records do not
match their audit chain (as ``planexec audit verify``: edited, or bytes
damaged inside a record, which SQLite's checks cannot see); 2 the store is
damaged (its file or schema), or cannot be checked (no store there, an
unreachable server, another application's database): one message, never
a traceback. Never creates a store and never writes to a damaged one (a
sound store of an older schema is migrated on open, as by every command).
Thin: `store.check` does the work. Imports `cli._common`, the store's
public API and its `check` (not in `planexec.store.__all__` yet).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from planexec.cli import _common as common
from planexec.errors import StoreError
from planexec.store import StoreCheck, check_store, store_target

__all__ = ["add_store_commands", "cmd_check"]


def add_store_commands(sub: Any) -> None:
    """Register ``store check`` on the CLI's subcommands."""
    p = sub.add_parser("store", help="the run store itself: check that it is sound")
    actions = p.add_subparsers(dest="store_action", required=True, metavar="ACTION")
    c = actions.add_parser(
        "check",
        help="check the whole store: the SQLite file page by page, the schema, every run's audit chain; exit 2 when damaged, 1 when tampered",
    )
    c.add_argument("--json", action="store_true", help="print the report as one JSON object")
    c.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    c.set_defaults(command=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """``planexec store check``: each check with its figures, each problem, the verdict; exit 0 healthy, 1 tampered, 2 damaged."""
    try:
        report = check_store(store_target(args.store, common.config().store))
    except StoreError as exc:  # no store there, unreachable, not ours
        raise common.UsageError(str(exc)) from None
    if args.json:
        common.emit(report.to_json(indent=2))
    else:
        _show(report)
    if report.damaged:
        return common.EXIT_USAGE
    return common.EXIT_OK if report.ok else common.EXIT_FAILED


def _show(report: StoreCheck) -> None:
    out = common.console()
    backend = "SQLite" if report.backend == "sqlite" else "PostgreSQL"
    out.print(Text(f"checking {report.location} ({backend})"))
    for name in report.checks:
        problems = [p for p in report.problems if p.check == name]
        verdict = ("ok", "green") if not problems else (f"{len(problems)} problem(s)", "bold red")
        out.print(Text.assemble(f"  {name:<7}", verdict, f" · {_figures(report, name)} · {report.seconds.get(name, 0.0):.2f}s"))
        for problem in problems[:20]:
            out.print(Text(f"          {problem.render()}", style="red"))
        if len(problems) > 20:
            out.print(Text(f"          ... and {len(problems) - 20} more (--json lists them all)", style="red"))
    for note in report.notes:
        out.print(Text(f"  {note}", style="yellow"))
    total = f" · {report.seconds.get('total', 0.0):.2f}s"
    if report.ok:
        out.print(Text.assemble(("healthy", "bold green"), total))
    elif report.damaged:
        out.print(Text.assemble(("DAMAGED", "bold red"), f": {report.location} is damaged{total}"))
        if report.repair:
            out.print(Text(f"to repair it: {report.repair}"))
    else:
        changed = sum(1 for p in report.problems if p.check == "audit")
        out.print(
            Text.assemble(
                ("TAMPERED OR DAMAGED", "bold red"),
                f": {changed} problem(s) with records that do not match their audit chain (edited after they were written, "
                f"or bytes damaged inside a record, where SQLite's own checks cannot see it){total}",
            )
        )


def _figures(report: StoreCheck, name: str) -> str:
    """What a check looked at, in numbers."""
    if name == "file":
        size = f"{(report.size_bytes or 0) / 2**20:.1f} MB"
        if report.pages is None:
            return size
        return f"{report.pages:,} pages of {report.page_size} bytes ({size}), {report.free_pages:,} free"
    if name == "schema":
        return f"version {report.schema_version}, {report.tables} tables"
    chained = report.runs - report.runs_not_chained
    old = f" ({report.runs_not_chained:,} recorded before the audit log)" if report.runs_not_chained else ""
    return (
        f"{report.runs:,} runs ({chained:,} chained){old}, {report.events:,} events, {report.records:,} records verified, "
        f"{report.templates:,} template versions"
    )
