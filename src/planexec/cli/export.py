"""The export command of the CLI: ``planexec export training OUTDIR``, the store's planning as fine-tuning data.

Owns reading the filters from the command line into a `TrainingFilter`
(each bad value a usage error naming its option, before anything is
written; so is an OUTDIR that is a file or cannot be written) and the
report: the files written with their record counts, the runs left out by
reason, and the runs whose records changed after they were written. Thin: `library.export_training` does the work.
Imports `cli._common` and the public `planexec.library`.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.text import Text

from planexec import RunStatus
from planexec.cli import _common as common
from planexec.library import LEFT_OUT, PAIR_KINDS, TrainingFilter, export_training

__all__ = ["add_export_commands"]

_STATUSES = ", ".join(s.value for s in RunStatus)  # every ending a run may have: the list cannot drift from the engine's

_ABOUT = """\
Write the planner's recorded conversations as JSONL a fine-tuning tool reads:

  sft-train.jsonl, sft-holdout.jsonl      {"messages": [system, example turns, goal, assistant: the plan that ran]}
  pairs-train.jsonl, pairs-holdout.jsonl  {"prompt": [...], "chosen": [plan that ran], "rejected": [a worse plan]}
  manifest.json                           counts, the filters, and the runs left out by reason

Each record has a "metadata" object (run, goal, planner model, format, plan hash, why).
Runs are read from the store: only runs that recorded what the planner was asked (stores of
schema 9 and later; older runs are counted as left out, with the reason). Text derived from untrusted tool output is left out unless
--include-untrusted; secrets are redacted; a goal's records all go to the same split.
"""


def add_export_commands(sub: Any) -> None:
    """Register ``export training`` on the CLI's subcommands."""
    p = sub.add_parser("export", help="export the store's data: planning conversations as fine-tuning JSONL")
    kinds = p.add_subparsers(dest="export_kind", required=True, metavar="KIND")
    t = kinds.add_parser(
        "training",
        help="supervised examples and preference pairs of the planner, from recorded runs",
        description=_ABOUT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("output", metavar="OUTDIR", help="the folder to write the JSONL files and manifest.json in (created)")
    t.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    t.add_argument(
        "--status",
        default="succeeded",
        metavar="S[,S...]",
        help=f"only runs that ended so (default: succeeded; 'any' for all): {_STATUSES}",
    )
    t.add_argument(
        "--since",
        metavar="TIME",
        help="only runs started at or after TIME (ISO 8601: 2026-11-01 or 2026-11-01T09:00+01:00; UTC if no zone)",
    )
    t.add_argument("--until", metavar="TIME", help="only runs started before TIME (as --since)")
    t.add_argument("--template", metavar="NAME", help="only runs whose plan was the plan library's template NAME, filled in")
    t.add_argument("--model", metavar="PROVIDER:MODEL", help="only plans that planner model wrote (as recorded, e.g. openai:gpt-4o)")
    t.add_argument("--by-person", action="store_true", help="only plans a person approved or edited (not --yes, not a policy)")
    t.add_argument("--no-refused-calls", action="store_true", help="leave out runs where the gate refused any call")
    t.add_argument(
        "--pairs",
        default=",".join(PAIR_KINDS),
        metavar="KIND[,KIND...]",
        help="which preference pairs: invalid (a draft sent back for repair), edited (a person changed the plan), replanned "
        "(a version replaced after a failure), refused (a version denied in the store, against a plan that ran for the same "
        "goal); 'none' for no pairs (default: all)",
    )
    t.add_argument(
        "--holdout", type=float, default=0.1, metavar="SHARE", help="the share of goals kept out for evaluation, 0 to below 1 (default 0.1)"
    )
    t.add_argument(
        "--include-untrusted",
        action="store_true",
        help="let in plans whose text derives from untrusted tool output (a replan after reading a web page); off by default",
    )
    t.add_argument("--limit", type=common.positive(int), metavar="N", help="read only the newest N runs")
    t.set_defaults(command=cmd_training)


def _when(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise common.UsageError(f"{option} {text!r} is not an ISO 8601 date or time (e.g. 2026-11-01 or 2026-11-01T09:00+01:00)") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _filters(args: argparse.Namespace) -> TrainingFilter:
    statuses = frozenset() if args.status.strip() == "any" else frozenset(s.strip() for s in args.status.split(",") if s.strip())
    pairs = frozenset() if args.pairs.strip() == "none" else frozenset(p.strip() for p in args.pairs.split(",") if p.strip())
    try:
        return TrainingFilter(
            statuses=statuses, since=_when(args.since, "--since"), until=_when(args.until, "--until"), template=args.template,
            model=args.model, by_person=args.by_person, no_refused_calls=args.no_refused_calls, pairs=pairs,
            holdout=args.holdout, include_untrusted=args.include_untrusted, limit=args.limit,
        )  # fmt: skip
    except ValueError as exc:  # the filter's own message names the field: say the option it came from
        said = str(exc)
        option = next((o for key, o in _OPTIONS.items() if key in said), "")
        raise common.UsageError(f"{option}: {said}" if option else said) from None


_OPTIONS = {"holdout": "--holdout", "pair kind": "--pairs", "run status": "--status", "since": "--since", "until": "--until"}


def cmd_training(args: argparse.Namespace) -> int:
    """``planexec export training``: write the files, then say what they hold and which runs were left out and why."""
    filters = _filters(args)  # every bad value is refused before the store is opened or a file written
    if Path(args.output).exists() and not Path(args.output).is_dir():
        raise common.UsageError(f"OUTDIR {args.output!r} is a file, not a folder: name a folder to write the JSONL files in")
    store = common.open_run_store(args.store, common.config(), create=False)
    try:
        found = export_training(store, args.output, filters)
    except OSError as exc:  # a folder that cannot be made or written: no permission, a file on its path, a full disk
        raise common.UsageError(f"OUTDIR {args.output!r}: cannot write the training files there: {exc.strerror or exc}") from None
    out = common.console()
    sft, pairs = len(found.sft) + len(found.sft_holdout), len(found.pairs) + len(found.pairs_holdout)
    out.print(
        Text(
            f"{sft} supervised example(s) and {pairs} preference pair(s) from {found.runs_used} of {found.runs_read} run(s) "
            f"in {store.location}, written to {args.output}"
        )
    )
    for name, records in found.files().items():
        out.print(Text(f"  {name:<22} {len(records)}"))
    if found.duplicates:
        out.print(Text(f"  {found.duplicates} duplicate record(s) left out (same goal and plan as a newer run's)"))
    for reason, n in found.left_out.most_common():
        out.print(Text(f"  left out {n} run(s), {reason}: {LEFT_OUT[reason]}", style="yellow"))
    if found.tampered:
        out.print(Text(f"  changed after they were written, not exported: {', '.join(found.tampered)}", style="yellow"))
    if found.untrusted_left_out and not filters.include_untrusted:
        out.print(Text("  (--include-untrusted lets in plans derived from untrusted tool output)", style="dim"))
    if not sft and not pairs:
        out.print(Text("nothing to export: no run passed the filters (see the reasons above)", style="yellow"))
    return common.EXIT_OK
