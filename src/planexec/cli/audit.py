"""The audit command of the CLI: ``planexec audit verify RUN_ID``, whether a recorded run's records are intact.

Owns showing `store.verify_run`'s report to a person: the verdict (intact,
tampered, or not chained: recorded before the audit log; a run recorded
after the audit log began with no chain is tampered), the run's head
(link, event seq and hash: publish the hash somewhere else to anchor the
run), and each problem with its seq (or link) and kind. ``--json`` prints
the report as one JSON object. Exit codes: 0 intact (or not chained), 1
any record changed, removed, reordered or inserted, 2 an unknown run or a
store that cannot be opened or read (one line, never a traceback). Reads
only; never creates a store. Thin: `store.audit` does the work. Imports
`cli._common` and the store's public API.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from planexec.cli import _common as common
from planexec.errors import StoreError
from planexec.store import AuditReport, verify_run

__all__ = ["add_audit_commands", "cmd_verify"]


def add_audit_commands(sub: Any) -> None:
    """Register ``audit verify`` on the CLI's subcommands."""
    p = sub.add_parser("audit", help="the run store's audit log: check that a run's stored records were not touched")
    actions = p.add_subparsers(dest="audit_action", required=True, metavar="ACTION")
    v = actions.add_parser(
        "verify", help="check every stored record of a run against its hash chain; exit 1 when any was changed, removed or reordered"
    )
    v.add_argument("run_id", metavar="RUN_ID")
    v.add_argument("--json", action="store_true", help="print the report as one JSON object")
    v.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    v.set_defaults(command=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    """``planexec audit verify RUN_ID``: the verdict, the head hash, each problem; exit 0 intact, 1 tampered."""
    store = common.open_run_store(args.store, common.config(), create=False)
    try:
        report = verify_run(store, args.run_id)
    except StoreError as exc:  # an unknown run (RunNotFoundError), an unreadable store
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    if args.json:
        common.emit(report.to_json(indent=2))
    else:
        _show(report, store.location)
    return common.EXIT_OK if report.ok else common.EXIT_FAILED


def _show(report: AuditReport, location: str) -> None:
    out = common.console()
    if not report.chained and report.ok:
        out.print(Text.assemble((f"run {report.run_id}: ", ""), (report.note, "yellow"), f" · {report.checked} records, nothing to verify"))
        return
    verdict = ("intact", "green") if report.ok else (f"TAMPERED: {len(report.problems)} problem(s)", "bold red")
    out.print(Text.assemble(f"run {report.run_id}: ", verdict, f" · {report.checked} records checked in {location}"))
    if report.head_hash is not None:
        out.print(Text(f"head: link {report.head_link} · seq {report.head_seq} · {report.head_hash}"))
    for problem in report.problems:
        out.print(Text(f"  {problem.render()}", style="red"))
