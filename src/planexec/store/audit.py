"""The audit log: every record of a run hash-chained, and `verify_run`, which tells whether any was touched.

Owns the chain's definition, shared by the writer (`sql.SqlRunStore`) and
the verifier: `GENESIS`, `canonical` JSON (sorted keys, compact separators),
`link_hash`, the canonical contents of the records that do not live in the
events table, `Chain` (a run's head while a transaction adds records),
the typed records a store hands the verifier (`ChainHead`, `ChainRecord`,
`AuditTrail`) and those it answers with (`AuditReport`, `AuditProblem`,
`ProblemKind`), and `verify_run` / `verify_trail`.

One chain per run, over every record the run has in the store, in the order
they were stored: its events, its plan versions (``plans``), and its
approval requests and decisions (``approvals``). Each record has a position
``link`` (0, 1, 2, ... across the three tables) and carries ``prev_hash``
and ``hash``, where::

    hash = sha256(json([prev_hash, run_id, link, kind, ref]) + "\\n" + content)

`kind` is the event's type (or ``plan``, ``approval_request``,
``approval_decision``), `ref` its key in its table (the event's seq, the
plan's version, ``step_id|content_hash`` for an approval) and `content` the
exact text stored: an event's canonical JSON (the store writes events in
canonical form, so the bytes hashed are the bytes stored and a one-byte
change anywhere is a change), or the canonical JSON of a row's stored
columns. The first record's ``prev_hash`` is `GENESIS`. The run's head
(last link, last event seq, head hash) is kept in ``audit_heads``, written
in the same transaction as every record: removing the tail leaves the head
pointing past it. The head lives in its own row, not in ``runs``, because
a run's chain starts before its ``runs`` row exists (the first plan version
is saved before `RunStarted`).

An approval is decided once: the decision is its own chained record (its
own link and hash), written into the request's row; the request's columns
never change (the store's triggers refuse it). Runs recorded before the
audit log have a head without a hash: `verify_run` reports them as not
chained, not as tampered, and records added to them later stay unchained
(a chain that started midway would vouch for nothing before it). The
store says when its audit log began (``audit_since``, see `schema`): a run
with no chain that was recorded after that lost its chain, and is reported
as tampered, not as old. A run's ``runs`` row is a summary made from its
events: what it says that the events do not (its goal, status, reason) is
reported as changed too, when the records themselves are intact. A template version carries a hash over its
columns (`template_hash`), checked each time it is read (`template_problem`):
templates are not runs, and have no chain or head. An
attacker who rewrites every record and the head consistently is not
caught here: publish the head hash (``planexec audit verify`` prints it)
to anchor a run outside the store. Imports `records`, `errors` and the
store's `base`.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from json.encoder import encode_basestring as _string  # a JSON string literal, as json.dumps writes it (ensure_ascii=False)
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import StoreError, TamperedError
from planexec.records import Record
from planexec.store.base import RunStore

__all__ = [
    "GENESIS",
    "AuditProblem",
    "AuditReport",
    "AuditTrail",
    "AuditedStore",
    "Chain",
    "ChainHead",
    "ChainRecord",
    "ProblemKind",
    "approval_ref",
    "canonical",
    "decision_content",
    "link_hash",
    "plan_content",
    "request_content",
    "require_intact",
    "tampered_run",
    "template_content",
    "template_hash",
    "template_problem",
    "verify_run",
    "verify_trail",
]

GENESIS = "sha256:" + "0" * 64  # the prev_hash of a run's first record
NOT_CHAINED = "not chained (recorded before the audit log)"

Table = Literal["event", "plan", "approval_request", "approval_decision"]


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(data: Any) -> str:
    """`data` as canonical JSON: sorted keys, compact separators, UTF-8 text kept as is; `ValueError` for NaN or infinity."""
    return _CANONICAL.encode(data)


_LARGE = 1 << 20  # characters of content past which a record is hashed in parts


def link_hash(prev_hash: str, run_id: str, link: int, kind: str, ref: int | str, content: str) -> str:
    """The hash of one record of a run's chain (see the module docstring)."""
    # json.dumps([prev_hash, run_id, link, kind, ref]) written out: the same text, 8x faster on the store's hot path
    key = str(int(ref)) if isinstance(ref, int) else _string(ref)
    # the header, a newline and the content, hashed in one call (the same bytes as three updates, for less)
    header = f"[{_string(prev_hash)},{_string(run_id)},{int(link)},{_string(kind)},{key}]\n"
    if len(content) > _LARGE:  # a large plan version: hashed in two parts, not copied once more into one string
        digest = hashlib.sha256(header.encode("utf-8", "surrogateescape"))
        digest.update(content.encode("utf-8", "surrogateescape"))
        return "sha256:" + digest.hexdigest()
    return "sha256:" + hashlib.sha256((header + content).encode("utf-8", "surrogateescape")).hexdigest()


_QUOTED: dict[str, str] = {}  # an event type as a JSON string, quoted once


def _quoted(kind: str) -> str:
    found = _QUOTED.get(kind)
    if found is None:
        found = _string(kind)
        if len(_QUOTED) < 256:  # the event types: a few dozen
            _QUOTED[kind] = found
    return found


def plan_content(plan: str, reason: str, diff: str | None, usage: str, created_at: str) -> str:
    """What a stored plan version's hash covers: its columns as stored (the version is its `ref`)."""
    return canonical({"plan": plan, "reason": reason, "diff": diff, "usage": usage, "created_at": created_at})


def request_content(step_id: str, content_hash: str, requested_at: str) -> str:
    """What an approval request's hash covers (`step_id` '' for the whole plan)."""
    return canonical({"step_id": step_id, "content_hash": content_hash, "requested_at": requested_at})


def decision_content(state: str, decided_at: str | None, decided_by: str | None, reason: str | None) -> str:
    """What an approval decision's hash covers."""
    return canonical({"state": state, "decided_at": decided_at, "decided_by": decided_by, "reason": reason})


def approval_ref(step_id: str | None, content_hash: str) -> str:
    """An approval's key within its run: the step ('' for the plan) and the content hash approved."""
    return f"{step_id or ''}|{content_hash}"


# --- what a store hands the verifier -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainHead(Record):
    """A run's head: its last link, its last event's seq, the last hash; all None for a run recorded before the audit log."""

    link: int | None
    seq: int | None
    hash: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainRecord(Record):
    """One stored record as the verifier reads it: its chain columns (None when it has none) and the content they cover."""

    table: Table
    kind: str
    ref: int | str
    content: str
    link: int | None
    prev_hash: str | None
    hash: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditTrail(Record):
    """Everything the store holds about one run's chain: the head (None when it has no head row) and every record.

    `recorded_at` is when the run's first records were written, by the latest
    of its own words for it (its ``runs`` row, its first event, its first plan
    version); `audit_since` when the store's audit log began. None: unknown.
    `summary`: what the run's ``runs`` row says that its events do not, one
    line each (the row is a summary made from the events, not chained itself).
    """

    run_id: str
    head: ChainHead | None
    records: list[ChainRecord]
    recorded_at: datetime | None = None
    audit_since: datetime | None = None
    summary: list[str] = field(default_factory=list)  # what its runs row says that its events do not


@runtime_checkable
class AuditedStore(Protocol):
    """A store that keeps the audit log (`sql.SqlRunStore` does)."""

    def audit_trail(self, run_id: str) -> AuditTrail:
        """The run's head and every record with its chain columns; `RunNotFoundError` for an unknown run."""
        ...


class Chain:
    """A run's head while one transaction adds records to its chain; `legacy` when the run was recorded before the log."""

    def __init__(self, run_id: str, head: ChainHead) -> None:
        self.run_id = run_id
        self.legacy = head.hash is None or head.link is None
        self.link = -1 if head.link is None else head.link
        self.seq = -1 if head.seq is None else head.seq
        self.hash = head.hash or GENESIS
        self.changed = False

    def add(self, kind: str, ref: int | str, content: str) -> tuple[int | None, str | None, str | None]:
        """The next record's (link, prev_hash, hash); (None, None, None) for a run outside the log."""
        if self.legacy:
            return None, None, None
        prev = self.hash
        self.link += 1
        self.hash = link_hash(prev, self.run_id, self.link, kind, ref, content)
        self.changed = True
        return self.link, prev, self.hash

    def event_rows(self, events: Sequence[Any], bodies: Sequence[str]) -> list[Any]:
        """Chain `events` (stored as `bodies`, in order) and move the head's seq: the flat parameters of the
        events table's INSERT, ``(run_id, seq, type, body, link, prev_hash, hash)`` for each event.

        The store's hot path (two events a step): `add` and `link_hash` written out in one loop, the
        run's id and each kind quoted once, so the hashes are the same and cost a microsecond less an event.
        """
        run_id = self.run_id
        out: list[Any] = []
        if self.legacy:
            for ev, body in zip(events, bodies, strict=True):
                out += (run_id, ev.seq, ev.type, body, None, None, None)
                self.seq = max(self.seq, ev.seq)
            return out
        run_q = _string(run_id)
        link, prev, seq = self.link, self.hash, self.seq
        prev_q = _string(prev)  # the head's hash as read (anything, in a damaged store); ours after it need no escaping
        sha256, quoted = hashlib.sha256, _QUOTED
        for ev, body in zip(events, bodies, strict=True):
            kind, ref = ev.type, int(ev.seq)
            link += 1
            text = f"[{prev_q},{run_q},{link},{quoted.get(kind) or _quoted(kind)},{ref}]\n{body}"
            digest = "sha256:" + sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
            out += (run_id, ref, kind, body, link, prev, digest)
            prev, prev_q = digest, f'"{digest}"'
            if ref > seq:
                seq = ref
        if events:
            self.link, self.hash, self.seq, self.changed = link, prev, seq, True
        return out


# --- the verdict ------------------------------------------------------------------------------------


class ProblemKind(str, Enum):
    """What is wrong with a record (or with where it is)."""

    CHANGED = "changed"  # its content (or its hash) is not what was chained
    REMOVED = "removed"  # a record in the middle is missing
    REORDERED = "reordered"  # an intact record stands where another belongs
    INSERTED = "inserted"  # a record that was never chained here
    TAIL_REMOVED = "tail_removed"  # the last records are missing: the head points past them


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditProblem(Record):
    """One thing wrong: its kind, the record (``event 5 (step_started)``, ``plan version 2``, ...), its link and event seq."""

    kind: ProblemKind
    record: str
    detail: str
    link: int | None = None
    seq: int | None = None  # the event's seq, when the record is (or was) an event

    def render(self) -> str:
        """One line: ``seq 5 · event 5 (step_started): changed: ...`` (no place for the run's head, chain or summary)."""
        where = f"seq {self.seq} · " if self.seq is not None else (f"link {self.link} · " if self.link is not None else "")
        return f"{where}{self.record}: {self.kind.value}: {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport(Record):
    """The verdict on one run: `ok` when nothing is wrong; `chained` False for a run recorded before the audit log."""

    run_id: str
    ok: bool
    chained: bool
    checked: int  # records read and checked
    head_link: int | None = None
    head_seq: int | None = None
    head_hash: str | None = None
    problems: list[AuditProblem] = field(default_factory=list)
    note: str = ""


def verify_run(store: RunStore, run_id: str) -> AuditReport:
    """Check every stored record of a run against its hash chain and head; the report names each problem.

    `RunNotFoundError` for an unknown run; a `StoreError` when the store
    cannot be read or keeps no audit log.
    """
    if not isinstance(store, AuditedStore):
        raise StoreError(f"{store.location}: this run store keeps no audit log", location=store.location)
    return verify_trail(store.audit_trail(run_id))


def require_intact(store: RunStore, run_id: str) -> AuditReport:
    """`verify_run`, for what is about to be used: its report when intact (or recorded before the audit log);
    `TamperedError` naming what changed, and how to see it all, when not."""
    report = verify_run(store, run_id)
    if not report.ok:
        raise tampered_run(report, store.location)
    return report


def verify_trail(trail: AuditTrail) -> AuditReport:
    """The verdict on a run's records as read from a store (pure: see `verify_run`)."""
    head, records = trail.head, trail.records
    problems: list[AuditProblem] = []
    summary = [AuditProblem(kind=ProblemKind.CHANGED, record="the run's summary (its runs row)", detail=line) for line in trail.summary]
    chained = [r for r in records if r.link is not None and r.hash is not None and r.prev_hash is not None]
    if head is not None and head.hash is None:
        if not chained:
            unchained = _unchained(trail)
            problems = ([] if unchained is None else [unchained]) + summary
            return AuditReport(
                run_id=trail.run_id, ok=not problems, chained=False, checked=len(records),
                problems=problems, note="" if unchained else NOT_CHAINED,
            )  # fmt: skip
        problems.append(
            AuditProblem(
                kind=ProblemKind.CHANGED,
                record="the run's head",
                detail=f"it says the run was {NOT_CHAINED}, yet {len(chained)} of its records are chained",
            )
        )
        head = None
    elif head is None and records:
        problems.append(AuditProblem(kind=ProblemKind.REMOVED, record="the run's head", detail="the run has records but no head"))
    ids = {id(r) for r in chained}
    for r in records:
        if id(r) not in ids:
            problems.append(_problem(ProblemKind.INSERTED, r, "not part of the audit chain (it has no hash)"))
    problems += _Walk(trail.run_id, chained, head).run()
    if not problems:  # a row that disagrees with changed events says nothing more
        problems = summary
    last = head if head is not None else _implied_head(chained)
    return AuditReport(
        run_id=trail.run_id, ok=not problems, chained=True, checked=len(records),
        head_link=last.link, head_seq=last.seq, head_hash=last.hash, problems=problems,
    )  # fmt: skip


def _unchained(trail: AuditTrail) -> AuditProblem | None:
    """The problem with a run that has no chain although it was recorded after the audit log began; None when it is old."""
    since, at = trail.audit_since, trail.recorded_at
    if since is None or at is None or at < since:
        return None
    return AuditProblem(
        kind=ProblemKind.REMOVED,
        record="the run's chain",
        detail=f"the run was recorded at {at:%Y-%m-%d %H:%M:%S} UTC, after the audit log began "
        f"({since:%Y-%m-%d %H:%M:%S} UTC), yet none of its records is chained: their hashes were removed",
    )


def tampered_run(report: AuditReport, location: str | None = None) -> TamperedError:
    """The `TamperedError` for a run whose report is not ok: it names what changed and how to see it all."""
    where = f" --store {shlex.quote(location)}" if location else ""
    return TamperedError(
        f"run {report.run_id}",
        [p.render() for p in report.problems],
        inspect=f"planexec audit verify {shlex.quote(report.run_id)}{where}",
        run_id=report.run_id,
        location=location,
    )


# --- template versions ------------------------------------------------------------------------------


def template_content(plan: str, params: str, description: str, source_run_id: str | None, created_at: str) -> str:
    """What a template version's hash covers: its columns as stored (its name and version are its key)."""
    return canonical({"plan": plan, "params": params, "description": description, "source_run_id": source_run_id,
                      "created_at": created_at})  # fmt: skip


def template_hash(name: str, version: int, content: str) -> str:
    """The hash of a template version (`template_content`), written with it and checked each time it is read."""
    return link_hash(GENESIS, name, version, "template", version, content)


def template_problem(name: str, version: int, content: str, digest: str | None, created_at: datetime | None,
                     since: datetime | None) -> str | None:  # fmt: skip
    """What is wrong with a stored template version, or None: its hash does not match, or it lost it.

    A version with no hash is one saved before versions were hashed (at
    `since`), unless it says it was saved after that.
    """
    if digest is None:
        if since is None or created_at is None or created_at < since:
            return None
        return (f"template {name!r} version {version}: it was saved at {created_at:%Y-%m-%d %H:%M:%S} UTC, after template "
                f"versions began to be hashed ({since:%Y-%m-%d %H:%M:%S} UTC), yet it has no hash: it was removed")  # fmt: skip
    if template_hash(name, version, content) != digest:
        return f"template {name!r} version {version}: changed: its content does not match its hash"
    return None


def _implied_head(chained: list[ChainRecord]) -> ChainHead:
    """The head the records imply when the run's head row is missing."""
    if not chained:
        return ChainHead(link=None, seq=None, hash=None)
    last = max(chained, key=lambda r: r.link or 0)
    seqs = [r.ref for r in chained if r.table == "event" and isinstance(r.ref, int)]
    return ChainHead(link=last.link, seq=max(seqs, default=-1), hash=last.hash)


def label(r: ChainRecord) -> str:
    """How a problem names a record."""
    if r.table == "event":
        return f"event {r.ref} ({r.kind})"
    if r.table == "plan":
        return f"plan version {r.ref}"
    step, _, digest = str(r.ref).partition("|")
    what = f"step {step}" if step else "the plan"
    return f"approval {'request' if r.table == 'approval_request' else 'decision'} for {what} ({digest[:19]}…)"


def _problem(kind: ProblemKind, r: ChainRecord, detail: str) -> AuditProblem:
    seq = r.ref if r.table == "event" and isinstance(r.ref, int) else None
    return AuditProblem(kind=kind, record=label(r), detail=detail, link=r.link, seq=seq)


def _intact(run_id: str, r: ChainRecord) -> bool:
    assert r.link is not None and r.prev_hash is not None
    return link_hash(r.prev_hash, run_id, r.link, r.kind, r.ref, r.content) == r.hash


class _Walk:
    """One pass over a run's chained records in link order (see `verify_trail`)."""

    def __init__(self, run_id: str, chained: list[ChainRecord], head: ChainHead | None) -> None:
        self.run_id = run_id
        order = {"event": 0, "plan": 1, "approval_request": 2, "approval_decision": 3}
        self.records = sorted(chained, key=lambda r: (r.link or 0, order[r.table], str(r.ref)))
        self.head = head if head is not None else _implied_head(chained)
        self.by_link: dict[int, list[ChainRecord]] = {}
        for r in self.records:
            self.by_link.setdefault(r.link or 0, []).append(r)
        self.by_hash = {r.hash: r for r in self.records}
        self.referenced = {r.prev_hash for r in self.records} | {self.head.hash}
        self.events_at = {r.ref: r for r in self.records if r.table == "event"}  # column seq -> record
        self.event_links = sorted((r.link or 0, r.ref) for r in self.records if r.table == "event" and isinstance(r.ref, int))
        self.home: dict[int, int] = {}  # id(record) -> the link where it verified
        self.reported: set[int] = set()
        self.problems: list[AuditProblem] = []

    def report(self, kind: ProblemKind, r: ChainRecord, detail: str) -> None:
        self.reported.add(id(r))
        self.problems.append(_problem(kind, r, detail))

    def run(self) -> list[AuditProblem]:
        head_link = self.head.link if self.head.link is not None else -1
        last = max(self.by_link, default=-1)
        expected: str | None = GENESIS
        previous: ChainRecord | None = None
        gap_from: int | None = None
        chosen: list[ChainRecord] = []
        for link in range(last + 1):
            group = self.by_link.get(link)
            if not group:
                gap_from = link if gap_from is None else gap_from
                continue
            after_gap = gap_from is not None
            if gap_from is not None:
                self.removed(gap_from, link - 1)
                gap_from = None
            r = next((c for c in group if c.prev_hash == expected and _intact(self.run_id, c)), group[0])
            for other in group:
                if other is not r:
                    self.report(ProblemKind.INSERTED, other, f"a second record at link {link}")
            if link > head_link:
                self.report(ProblemKind.INSERTED, r, f"after the run's head (link {head_link})")
            elif not _intact(self.run_id, r):
                self.misplaced_or_changed(r)
            elif r.prev_hash != expected and not after_gap:
                if previous is None:
                    self.report(ProblemKind.CHANGED, r, "the chain does not start from the genesis value")
                elif id(previous) not in self.reported:
                    self.report(ProblemKind.CHANGED, previous, "rewritten: the next record was chained to another hash")
            expected, previous = r.hash, r
            chosen.append(r)
        self.tail(last, head_link, previous)
        self.orphans(chosen, last, head_link)
        return sorted(self.problems, key=lambda p: -1 if p.link is None else p.link)  # in chain order

    def misplaced_or_changed(self, r: ChainRecord) -> None:
        """A record whose hash does not match where it is: an intact record of another place (reordered), else changed."""
        found = self.original(r)
        if found is None:
            self.report(ProblemKind.CHANGED, r, "its content does not match its hash")
            return
        ref, link = found
        if ref != r.ref:
            self.report(ProblemKind.REORDERED, r, f"it holds event {ref}, which belongs at seq {ref}")
        else:
            self.report(ProblemKind.REORDERED, r, f"it was chained at link {link}, not {r.link}")

    def original(self, r: ChainRecord) -> tuple[int | str, int] | None:
        """(ref, link) where a record verifies when it is intact but not where it was chained (an event says its own seq)."""
        kind, ref = r.kind, r.ref
        if r.table == "event":
            try:
                body = json.loads(r.content)
                kind, ref = body["type"], body["seq"]
            except (ValueError, TypeError, KeyError):
                return None
            if not isinstance(ref, int) or not isinstance(kind, str):
                return None
        candidates = [(r.prev_hash, r.hash, r.link)]  # its chain columns moved with it
        before = self.by_hash.get(r.prev_hash)
        if before is not None:  # right after the record it was chained to, wherever that one was chained
            candidates.append((r.prev_hash, r.hash, self.home.get(id(before), before.link or 0) + 1))
        home = self.events_at.get(ref) if r.table == "event" else None
        if home is not None and home is not r:  # only its content moved: its chain columns are at its own seq
            candidates.append((home.prev_hash, home.hash, home.link))
        for prev, digest, link in candidates:
            if prev is not None and link is not None and link_hash(prev, self.run_id, link, kind, ref, r.content) == digest:
                self.home[id(r)] = link
                return ref, link
        return None

    def removed(self, first: int, last: int) -> None:
        """Links `first`..`last` are missing from the middle of the chain."""
        seqs = self.missing_events(first, last)
        links = f"link {first}" if first == last else f"links {first}–{last}"
        if seqs:
            what = f"event {seqs[0]}" if len(seqs) == 1 else f"events {seqs[0]}–{seqs[-1]}"
        else:
            what = f"{last - first + 1} record(s), no event"
        self.problems.append(
            AuditProblem(
                kind=ProblemKind.REMOVED, record=what, detail=f"{links} of the chain are missing", link=first, seq=seqs[0] if seqs else None
            )
        )

    def missing_events(self, first: int, last: int) -> list[int]:
        """The event seqs that were stored between links `first` and `last` (by the seqs of the events around them)."""
        i = bisect.bisect_left(self.event_links, (first, -1))
        before = self.event_links[i - 1][1] if i > 0 else -1
        j = bisect.bisect_right(self.event_links, (last, 1 << 62))
        after = self.event_links[j][1] if j < len(self.event_links) else (self.head.seq if self.head.seq is not None else before) + 1
        return [s for s in range(before + 1, after) if s not in self.events_at]

    def tail(self, last: int, head_link: int, previous: ChainRecord | None) -> None:
        if last < head_link:
            seqs = self.missing_events(last + 1, head_link)
            links = f"link {head_link}" if last + 1 == head_link else f"links {last + 1}–{head_link}"
            what = "no event" if not seqs else (f"event {seqs[0]}" if len(seqs) == 1 else f"events {seqs[0]}–{seqs[-1]}")
            self.problems.append(
                AuditProblem(
                    kind=ProblemKind.TAIL_REMOVED,
                    record=what,
                    link=last + 1,
                    seq=seqs[0] if seqs else None,
                    detail=f"{links} are missing from the end: the run's head is link {head_link}",
                )
            )
        elif previous is not None and last == head_link and previous.hash != self.head.hash and id(previous) not in self.reported:
            self.report(ProblemKind.CHANGED, previous, "rewritten: the run's head holds another hash")

    def orphans(self, chosen: list[ChainRecord], last: int, head_link: int) -> None:
        """Intact records nothing was chained to, not explained by a gap after them: inserted in the middle."""
        for r in chosen:
            link = r.link or 0
            gap_after = (link + 1 not in self.by_link) if link < last else last < head_link
            if r.hash not in self.referenced and id(r) not in self.reported and not gap_after:
                self.report(ProblemKind.INSERTED, r, "no later record was chained to it")
