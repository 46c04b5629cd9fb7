"""Training data from the run store: the planner's conversations and the plans that ran, as JSONL a fine-tuning tool reads.

Owns `TrainingFilter` (which runs count), `TrainingSet` (the records, split
by goal, and what was left out and why), `training_set` (store -> records)
and `export_training` (records -> files). Two kinds of record:

* supervised (``sft``): ``{"messages": [...], "metadata": {...}}``, the
  planner's opening conversation as the run recorded it (the system prompt
  with the catalogue as it was then, the example turns, the goal) and the
  plan that finally ran as the assistant's answer, in the format that
  prompt asked for (the JSON draft, or the compact form). The model's own
  text when it ran unchanged, else the plan written in that format
  (`planning.draft_schema.plan_to_draft`, `plan.compact.print_compact`).
* preference pairs (``pairs``): ``{"prompt": [...], "chosen": [...],
  "rejected": [...], "metadata": {"kind", "why", ...}}`` (the conversational
  form TRL's DPO trainer reads), a rejected plan against the plan that ran:
  ``invalid`` (a draft sent back for repair, with its problems), ``edited``
  (the plan a person changed, in review or in the store), ``replanned`` (a
  version replaced after a failure) and ``refused`` (a version a person or a
  policy denied in the store; its chosen plan is the one that ran for the
  same goal in another run).

A run is read only when its records match their audit chain (a run
changed behind the store's back is left out as ``tampered``, never
exported), it recorded what the planner was asked in the shape planexec
writes (``RunStarted.setup["planner"]``, store schema 9 and on), is not a
sub-team's (its goal is a step's words) nor one agent's, its plan was not
denied in the store (a denied plan is only ever the rejected side of a
pair), and it passes the filter. Text that derives from untrusted tool
output never enters a record unless `TrainingFilter.include_untrusted`: a
version written by a replanner that had read untrusted output, or the
error message of a step that may carry outside words (a tool with
untrusted output, or one the run did not record as trusted, a role that
called one, a sub-team; any step of a run that recorded no tools' trust),
a step marked ``untrusted_from``. Records are
deduplicated by goal and plan (the plan its text writes, however spaced;
the newest run's kept), split into train
and holdout by a hash of the goal (a goal's records are all on one side),
and redacted with the store's redactor (`secrets.redact`) before they are
written, inside the JSON strings of a plan's text too (where a secret with
a quote or a backslash is written escaped). Every run left out is counted
under its reason. Reading one run is `library.recorded`'s. Imports it, `store`,
`engine` records and `secrets`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from planexec.engine.results import RunStatus
from planexec.library.recorded import RecordedRun, read_run, run_status
from planexec.secrets import redact, secrets
from planexec.store.base import RunStore

__all__ = ["LEFT_OUT", "PAIR_KINDS", "TRAINING_FILES", "TrainingFilter", "TrainingSet", "export_training", "training_set"]

PairKind = Literal["invalid", "edited", "replanned", "refused"]
PAIR_KINDS: tuple[PairKind, ...] = ("invalid", "edited", "replanned", "refused")
# the files `export_training` writes in its folder, and the manifest beside them
TRAINING_FILES = ("sft-train.jsonl", "sft-holdout.jsonl", "pairs-train.jsonl", "pairs-holdout.jsonl")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')  # a JSON string literal: a JSON draft's, and the compact form's values

# why a run gave no record (the manifest's `left_out`, and `planexec export training`'s report)
LEFT_OUT = {
    "tampered": "its records do not match their audit chain: changed after they were written (planexec audit verify RUN_ID)",
    "unreadable": "its records cannot be read (a damaged store, or records a newer planexec wrote)",
    "no_prompt": "recorded no planner conversation (a plan file, or a store older than schema 9)",
    "malformed": "what it recorded of the planner is not in the shape planexec writes (a conversation of role/content texts)",
    "single_agent": "one agent worked the goal: no plan of the planner's ran",
    "sub_run": "a sub-team's run: its goal is a step's words",
    "status": "did not end as the filter asks",
    "date": "started outside the date range",
    "template": "its plan did not come from that template",
    "model": "another planner model wrote its plan",
    "not_by_person": "no person reviewed or edited its plan",
    "refused_calls": "some of its calls were refused",
    "denied": "its plan was denied in the store: it never ran (a refused pair may set it against a plan that did)",
    "untrusted": "its plan derives from untrusted tool output",
    "unwritable": "its plan cannot be written in the format its prompt asked for (the compact form)",
    "no_plan": "has no stored plan",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingFilter:
    """Which runs give records (see `training_set`); the defaults keep plans that ran to success, any reviewer, any model.

    `statuses` the run's ending (``succeeded`` by default; empty: any);
    `since`/`until` bound when it started; `template` keeps runs whose plan
    was that template of the plan library, filled in; `model` runs whose plan
    that planner model wrote (``provider:name`` as recorded); `by_person`
    runs whose plan a person approved or edited (not ``--yes`` or a policy);
    `no_refused_calls` runs where the gate refused no call; `pairs` which
    kinds of preference pair to make; `holdout` the share of goals kept
    out of training; `include_untrusted` lets text derived from untrusted tool
    output in; `limit` reads only the newest runs.
    """

    statuses: frozenset[str] = frozenset({"succeeded"})
    since: datetime | None = None
    until: datetime | None = None
    template: str | None = None
    model: str | None = None
    by_person: bool = False
    no_refused_calls: bool = False
    pairs: frozenset[str] = frozenset(PAIR_KINDS)
    holdout: float = 0.1
    include_untrusted: bool = False
    limit: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"holdout is a share of the goals from 0 to below 1, not {self.holdout}")
        unknown = sorted(set(self.pairs) - set(PAIR_KINDS))
        if unknown:
            raise ValueError(f"unknown pair kind {', '.join(unknown)}: choose from {', '.join(PAIR_KINDS)}")
        unknown = sorted(set(self.statuses) - {s.value for s in RunStatus})
        if unknown:
            raise ValueError(f"unknown run status {', '.join(unknown)}: choose from {', '.join(s.value for s in RunStatus)}")
        for name in ("since", "until"):
            when = getattr(self, name)
            if when is not None and when.tzinfo is None:
                raise ValueError(f"{name} needs a time zone (e.g. 2026-11-01T00:00+00:00)")
        if self.since and self.until and self.since >= self.until:
            raise ValueError("since must be before until")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be 1 or more")


@dataclass(slots=True)
class TrainingSet:
    """The records of `training_set`, split by goal, with what was read and what was left out (reason -> runs)."""

    sft: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    sft_holdout: list[dict[str, Any]] = field(default_factory=list)
    pairs_holdout: list[dict[str, Any]] = field(default_factory=list)
    runs_read: int = 0
    runs_used: int = 0
    left_out: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    untrusted_left_out: int = 0  # records (not runs) left out because their text derives from untrusted output
    tampered: list[str] = field(default_factory=list)  # the runs left out because their records changed (to audit)

    def files(self) -> dict[str, list[dict[str, Any]]]:
        """The records of each file in `TRAINING_FILES`."""
        return dict(zip(TRAINING_FILES, (self.sft, self.sft_holdout, self.pairs, self.pairs_holdout), strict=True))

    def manifest(self, filters: TrainingFilter) -> dict[str, Any]:
        """What the export holds and why runs were left out (written as ``manifest.json``)."""
        when = {k: getattr(filters, k).isoformat() for k in ("since", "until") if getattr(filters, k) is not None}
        return {
            "format": "planexec.training",
            "format_version": 1,
            "created_at": datetime.now(UTC).isoformat(),
            "files": {name: len(records) for name, records in self.files().items()},
            "runs_read": self.runs_read,
            "runs_used": self.runs_used,
            "left_out": {reason: {"runs": n, "why": LEFT_OUT[reason]} for reason, n in self.left_out.most_common()},
            "duplicates": self.duplicates,
            "untrusted_left_out": self.untrusted_left_out,
            "tampered": self.tampered,
            "filters": {
                "statuses": sorted(filters.statuses), **when, "template": filters.template, "model": filters.model,
                "by_person": filters.by_person, "no_refused_calls": filters.no_refused_calls, "pairs": sorted(filters.pairs),
                "holdout": filters.holdout, "include_untrusted": filters.include_untrusted, "limit": filters.limit,
            },
        }  # fmt: skip


def training_set(store: RunStore, filters: TrainingFilter | None = None) -> TrainingSet:
    """The supervised records and preference pairs of `store`'s runs that pass `filters` (see the module docstring)."""
    filters = filters or TrainingFilter()
    out = TrainingSet()
    kept: list[RecordedRun] = []
    refused: list[RecordedRun] = []  # runs whose plan was denied: pairs against a kept plan of the same goal
    for summary in store.runs(limit=filters.limit):  # newest first: a duplicate keeps the newest run's record
        out.runs_read += 1
        found = read_run(store, summary)
        if isinstance(found, str):
            out.left_out[found] += 1
            if found == "tampered":
                out.tampered.append(summary.run_id)
            continue
        if found.denied and "refused" in filters.pairs and not _left_out_by_choice(found, filters, status=False):
            refused.append(found)
        why = _left_out_by_choice(found, filters) or ("denied" if found.final_denied else None)
        if why is not None:
            out.left_out[why] += 1
            continue
        kept.append(found)
    seen: set[str] = set()
    by_goal: dict[str, RecordedRun] = {}  # a goal's plan that ran: the newest that succeeded, else the newest
    for run in kept:
        final = run.versions[-1]
        if run.untrusted(final.version) and not filters.include_untrusted:
            out.left_out["untrusted"] += 1
            out.untrusted_left_out += 1
            continue
        chosen = run.final_text()
        if chosen is None:
            out.left_out["unwritable"] += 1
            continue
        out.runs_used += 1
        known = by_goal.get(_norm(run.goal))
        if known is None or (run_status(run.summary) == "succeeded" and run_status(known.summary) != "succeeded"):
            by_goal[_norm(run.goal)] = run
        record = {"messages": [*run.prompt, {"role": "assistant", "content": chosen}], "metadata": run.metadata()}
        _add(out, seen, filters, run.goal, "sft", run.plan_key(chosen), record)
        for kind, rejected, why in _rejected(run, filters):
            _pair(out, seen, filters, run, kind, rejected, chosen, why)
    for run in refused:
        other = by_goal.get(_norm(run.goal))
        chosen = run.render(other.versions[-1].plan) if other is not None else None
        if other is None or chosen is None:
            continue
        for version in run.denied:
            if run.untrusted(version) and not filters.include_untrusted:
                out.untrusted_left_out += 1
                continue
            plan = run.versions[version - 1].plan
            why = f"v{version} was denied in the store; the plan that ran for this goal is run {other.summary.run_id}'s"
            _pair(out, seen, filters, run, "refused", run.render(plan), chosen, why, chosen_from=other.summary.run_id)
    return out


def export_training(store: RunStore, folder: str | Path, filters: TrainingFilter | None = None) -> TrainingSet:
    """Write `training_set(store, filters)` to `folder` (created): the JSONL files of `TRAINING_FILES` and ``manifest.json``.

    `OSError` when `folder` cannot be made or written (a file of that name, no permission); nothing is read before it is made.
    """
    filters = filters or TrainingFilter()
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    found = training_set(store, filters)
    for name, records in found.files().items():
        with (target / name).open("w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    (target / "manifest.json").write_text(json.dumps(found.manifest(filters), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return found


def _left_out_by_choice(run: RecordedRun, filters: TrainingFilter, *, status: bool = True) -> str | None:
    """The filter's reason to leave `run` out (a key of `LEFT_OUT`), or None; `status` False ignores how it ended."""
    summary = run.summary
    if status and filters.statuses and run_status(summary) not in filters.statuses:
        return "status"
    started = summary.started_at if summary.started_at.tzinfo else summary.started_at.replace(tzinfo=UTC)
    if (filters.since and started < filters.since) or (filters.until and started >= filters.until):
        return "date"
    reuse = run.setup.get("reuse") or {}
    if filters.template is not None and (reuse.get("template") != filters.template or reuse.get("fallback")):
        return "template"
    if filters.model is not None and run.asked.get("model") != filters.model:
        return "model"
    if filters.by_person and not run.person:
        return "not_by_person"
    if filters.no_refused_calls and run.refused_calls:
        return "refused_calls"
    return None


def _rejected(run: RecordedRun, filters: TrainingFilter) -> Iterator[tuple[str, str | None, str]]:
    """The rejected plans of a kept run: (kind, text, why); the text None when the prompt's format cannot write it."""
    if "invalid" in filters.pairs:
        for d in run.drafts:
            if d.problems and d.text:
                yield "invalid", str(d.text), "; ".join(d.problems)
    final = run.versions[-1]
    if "edited" in filters.pairs:
        review = run.setup.get("review") or {}
        accepted = next((d for d in reversed(run.drafts) if not d.problems and d.text), None)
        if review.get("edited") and accepted is not None:
            yield "edited", str(accepted.text), f"{review.get('by', 'a person')} edited the planner's plan before it ran"
        for v in run.versions[1:]:
            if v.reason.startswith("edited by ") and v.version > 1:
                earlier = run.versions[v.version - 2]
                if not run.untrusted(earlier.version) or filters.include_untrusted:
                    yield "edited", run.render(earlier.plan), f"v{earlier.version} was {v.reason}"
    if "replanned" in filters.pairs:
        for version, why in sorted(run.replans.items()):
            earlier = run.versions[version - 2]
            if version <= final.version and (not run.untrusted(earlier.version) or filters.include_untrusted):
                yield "replanned", run.render(earlier.plan), f"v{earlier.version} was replaced after a failure: {why}"


def _pair(
    out: TrainingSet, seen: set[str], filters: TrainingFilter, run: RecordedRun, kind: str, rejected: str | None, chosen: str, why: str,
    **more: Any,
) -> None:  # fmt: skip
    if rejected is None:
        return
    worse, better = run.plan_key(rejected), run.plan_key(chosen)
    if worse == better:
        return  # the change is not one a planner writes (criteria, retries, its text's spacing): nothing to prefer
    record = {
        "prompt": run.prompt,
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
        "metadata": run.metadata(kind=kind, why=why, **more),
    }
    _add(out, seen, filters, run.goal, "pairs", better + "\x00" + worse, record)


def _add(out: TrainingSet, seen: set[str], filters: TrainingFilter, goal: str, kind: str, plans: str, record: dict[str, Any]) -> None:
    """Keep `record` unless one of the same goal and plans (`RecordedRun.plan_key`) came first; in the holdout when its goal's
    hash says so."""
    key = hashlib.sha256(f"{kind}\x00{_norm(goal)}\x00{plans}".encode()).hexdigest()
    if key in seen:
        out.duplicates += 1
        return
    seen.add(key)
    record = _hide_quoted(redact(record))
    holdout = _bucket(goal) < filters.holdout
    if kind == "sft":
        (out.sft_holdout if holdout else out.sft).append(record)
    else:
        (out.pairs_holdout if holdout else out.pairs).append(record)


def _hide_quoted(value: Any) -> Any:
    """`value` (a record, redacted) with the secrets inside its texts' JSON string literals hidden as well: there a secret
    with a quote, a backslash or a control character is written escaped, which `redact` does not look through."""
    if isinstance(value, dict):
        return {k: _hide_quoted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide_quoted(v) for v in value]
    if not isinstance(value, str) or '"' not in value or not secrets.may_be_in(value):
        return value

    def hide(m: re.Match[str]) -> str:
        try:
            inner = json.loads(m.group())
        except ValueError:
            return m.group()
        hidden = _hide_quoted(redact(inner))
        return m.group() if hidden == inner else json.dumps(hidden, ensure_ascii=False)

    return _QUOTED.sub(hide, value)


def _bucket(goal: str) -> float:
    """Where `goal` falls in [0, 1): the same goal always falls in the same place, whatever run it came from."""
    return int(hashlib.sha256(_norm(goal).encode()).hexdigest()[:12], 16) / float(16**12)


def _norm(goal: str) -> str:
    return " ".join(goal.lower().split())
