"""The plan library: plans kept as named, versioned templates with declared parameters, and run again without a planner.

Owns the template syntax and everything done with it: making a template
from a stored run's approved plan (`make_template`, `save_run_template`),
filling it in (`instantiate`), comparing two versions (`diff_templates`,
`TemplateDiff`). `TemplateError` is its exception. The templates themselves
are kept by the run store (`RunStore.save_template` and friends).

**Placeholders.** ``{{name}}`` (a letter or ``_``, then letters, digits,
``_`` or ``-``) stands for a declared parameter in the text fields of a
plan: its goal, and each step's instruction and parameters (strings at any
depth), the inline rollback plan's goal and steps included. Every other
field (ids, actions, workers, dependencies, criteria) is literal. In a text
field ``{{{{`` writes a literal ``{{``, so a plan whose text holds ``{{x}}``
is saved as ``{{{{x}}``; ``{{ name }}`` (with spaces) is literal text.
Step references (``${step.path}``, and the escape ``$${``) are a separate
syntax: saving never replaces anything inside one, and a value filled in
never becomes one (its ``${`` is escaped as ``$${``; a value that would still
join the text around it into a reference is an error).

**Values.** ``NAME=TEXT`` gives a string; ``NAME:=JSON`` gives any JSON value
(``-p replicas:=3``). A placeholder that is a whole parameter value takes
the value with its type; anywhere else the value is formatted into the text
(JSON for non-strings). Saving replaces every occurrence of each string
value in the text fields, leftmost first and, at one position, the longest
value first; a typed value replaces the whole parameter values equal to it.

The export file (sharing templates) is `library_file`'s.

Imports `plan`, `plan_diff`, `validation`, `records`, `errors`, `registry`
and the store's `base`; never the engine or the CLI.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from planexec.errors import PlanError
from planexec.plan.diff import PlanDiff, diff_plans
from planexec.plan.model import Plan
from planexec.plan.references import find_references
from planexec.plan.validation import check_plan
from planexec.records import Record
from planexec.store.base import ApprovalState, RunStore, Template
from planexec.workers.registry import Registry

__all__ = [
    "PARAM_NAME",
    "FieldChange",
    "SavedTemplate",
    "TemplateDiff",
    "TemplateError",
    "diff_templates",
    "instantiate",
    "make_template",
    "parse_values",
    "placeholders",
    "save_run_template",
]

PARAM_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*"
_NAME = re.compile(rf"^{PARAM_NAME}$")
_ASSIGNMENT = re.compile(rf"^({PARAM_NAME})(:?=)(.*)$", re.DOTALL)
_TEXT = re.compile(r"\{\{\{\{|\{\{(" + PARAM_NAME + r")\}\}")  # "{{{{" (a literal "{{") or "{{name}}"
_REFERENCE = r"\$\$\{|\$\{[A-Za-z0-9_][A-Za-z0-9_\-]*(?:\.[^.}\s]+)*\}"  # plan.py's escape and reference
_STEP_FIELDS = ("instruction", "parameters")
_PLAN_FIELDS = ("goal", "risk_level", "estimated_duration", "answer_step", "rollback_plan")
_KEEP = object()  # a leaf function's "not mine: keep it (or look inside)"


class TemplateError(PlanError):
    """A template cannot be made, filled in, read or imported: `rule` says why, `names` the parameters or values concerned.

    `template` names the template (or the run or file) it is about.
    Rules: ``bad_assignment``, ``no_plan``, ``not_approved``,
    ``value_not_found``, ``placeholder_missing``, ``undeclared_placeholder``,
    ``missing_parameters``, ``extra_parameters``, ``reference``,
    ``not_reproduced``, ``bad_name``, ``bad_file``.
    """

    def __init__(self, message: str, *, rule: str, template: str | None = None, names: Iterable[str] = ()) -> None:
        self.rule = rule
        self.template = template
        self.names = list(names)
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedTemplate(Record):
    """A template saved from a run: the stored `template`, the run and plan version it came from, and where each parameter went."""

    template: Template
    run_id: str
    plan_version: int
    occurrences: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldChange(Record):
    """One field that differs between two versions: of step `step_id` (None: of the plan), `field` (dotted), `old` and `new`."""

    step_id: str | None
    field: str
    old: Any = None
    new: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateDiff(Record):
    """What changed from one version of a template to another: parameters, the steps (`plan`) and each changed field."""

    name: str
    old_version: int
    new_version: int
    plan: PlanDiff
    params_added: list[str] = field(default_factory=list)
    params_removed: list[str] = field(default_factory=list)
    changes: list[FieldChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the two versions declare the same parameters and hold the same plan."""
        return not (self.params_added or self.params_removed or self.changes or not self.plan.empty)

    def render(self) -> str:
        """Readable lines: the step-level diff, parameters added and removed, then ``where: old -> new`` per field."""
        lines = [f"template {self.name!r} v{self.old_version} -> v{self.new_version}"]
        lines += [f"+ parameter {p}" for p in self.params_added] + [f"- parameter {p}" for p in self.params_removed]
        lines += self.plan.render().splitlines()[1:]
        for c in self.changes:
            where = f"{c.step_id}.{c.field}" if c.step_id else c.field
            lines.append(f"  {where}: {_show(c.old)} -> {_show(c.new)}")
        return "\n".join(lines)


# --- values -------------------------------------------------------------------


def parse_values(items: Iterable[str], *, bare: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Read ``NAME=TEXT`` and ``NAME:=JSON`` (and, with `bare`, ``NAME`` alone): the values, and the names given bare."""
    values: dict[str, Any] = {}
    declared: list[str] = []
    for item in items:
        m = _ASSIGNMENT.match(item)
        if m is None and bare and _NAME.match(item):
            name = item
        elif m is None:
            form = "NAME=VALUE, NAME:=JSON or NAME" if bare else "NAME=VALUE or NAME:=JSON"
            raise TemplateError(
                f"a parameter is {form} (NAME: letters, digits, '_', '-'), not {item!r}", rule="bad_assignment", names=[item]
            )
        else:
            name = m.group(1)
        if name in values or name in declared:
            raise TemplateError(f"parameter {name!r} is given more than once", rule="bad_assignment", names=[name])
        if m is None:
            declared.append(name)
        elif m.group(2) == ":=":
            try:
                values[name] = json.loads(m.group(3))
            except ValueError as exc:
                raise TemplateError(
                    f"parameter {name!r}: {m.group(3)!r} is not JSON ({exc})", rule="bad_assignment", names=[name]
                ) from None
        else:
            values[name] = m.group(3)
    return values, declared


# --- walking a plan's text fields ---------------------------------------------


def _rewrite(data: dict[str, Any], leaf: Callable[[Any, str, bool], Any]) -> dict[str, Any]:
    """A copy of plan data with `leaf(value, where, in_step)` applied to its text fields (see the module docstring).

    `leaf` returns `_KEEP` for values it leaves alone: containers are then looked into.
    """

    def walk(value: Any, where: str, in_step: bool) -> Any:
        new = leaf(value, where, in_step)
        if new is not _KEEP:
            return new
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}", in_step) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}.{i}", in_step) for i, v in enumerate(value)]
        return value

    def steps(items: Any, prefix: str) -> Any:
        if not isinstance(items, list):
            return items
        out = []
        for step in items:
            if isinstance(step, dict):
                sid = f"{prefix}{step.get('id', '?')}"
                step = {k: walk(v, f"{sid}.{k}", True) if k in _STEP_FIELDS else v for k, v in step.items()}
            out.append(step)
        return out

    out = dict(data)
    if isinstance(out.get("goal"), str):
        out["goal"] = walk(out["goal"], "goal", False)
    if "steps" in out:
        out["steps"] = steps(out["steps"], "")
    rollback = out.get("rollback_plan")
    if isinstance(rollback, dict):
        rollback = dict(rollback)
        if isinstance(rollback.get("goal"), str):
            rollback["goal"] = walk(rollback["goal"], "rollback_plan.goal", False)
        if "steps" in rollback:
            rollback["steps"] = steps(rollback["steps"], "rollback_plan.")
        out["rollback_plan"] = rollback
    return out


def _pieces(text: str) -> list[tuple[bool, str]]:
    """A template string as (is_placeholder, text or name) pieces, ``{{{{`` read as a literal ``{{``."""
    pieces: list[tuple[bool, str]] = []
    at = 0
    for m in _TEXT.finditer(text):
        literal = text[at : m.start()] + ("{{" if m.group(1) is None else "")
        if literal:
            pieces.append((False, literal))
        if m.group(1) is not None:
            pieces.append((True, m.group(1)))
        at = m.end()
    if text[at:]:
        pieces.append((False, text[at:]))
    return pieces


def placeholders(plan: Mapping[str, Any]) -> list[str]:
    """The parameter names a template's plan data uses, in the order they first appear."""
    found: dict[str, None] = {}

    def leaf(value: Any, where: str, in_step: bool) -> Any:
        if isinstance(value, str):
            found.update((name, None) for is_name, name in _pieces(value) if is_name)
        return _KEEP

    _rewrite(dict(plan), leaf)
    return list(found)


# --- making a template ----------------------------------------------------------


def make_template(plan: Plan, values: Mapping[str, Any], declared: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Plan data with each value replaced by its ``{{name}}``, and where each parameter went.

    `declared` names parameters the plan already writes as ``{{name}}``.
    A value that occurs nowhere, a declared name with no placeholder, an
    empty value, or two parameters with one value is a `TemplateError`.
    """
    _check_names([*values, *declared])
    text = {n: v for n, v in values.items() if isinstance(v, str)}
    typed = {_canonical(v): n for n, v in values.items() if not isinstance(v, str)}
    if any(v == "" for v in text.values()):
        raise TemplateError(
            "an empty value cannot be saved as a parameter", rule="bad_assignment", names=[n for n, v in text.items() if v == ""]
        )
    canon = [_canonical(v) for v in values.values()]
    same = [n for n, c in zip(values, canon, strict=True) if canon.count(c) > 1]
    if same:
        raise TemplateError(f"parameters {', '.join(same)} have the same value", rule="bad_assignment", names=same)
    by_value = {v: n for n, v in text.items()}
    # one alternative per kind of token, tried in this order at each position: references and "$${" stay as they
    # are, then the declared placeholders, then the values (longest first), then a literal "{{" (escaped)
    kinds = [("reference", _REFERENCE), ("declared", r"\{\{(?:" + "|".join(map(re.escape, declared)) + r")\}\}" if declared else r"(?!)")]
    kinds += [("value", re.escape(v)) for v in sorted(text.values(), key=lambda v: (-len(v), v))] + [("braces", r"\{\{")]
    token = re.compile("|".join(f"({pattern})" for _, pattern in kinds))
    occurrences: dict[str, list[str]] = {}

    def leaf(value: Any, where: str, in_step: bool) -> Any:
        if not isinstance(value, str):
            name = typed.get(_canonical(value)) if in_step and _in_parameters(where) else None
            if name is None:
                return _KEEP
            occurrences.setdefault(name, []).append(where)
            return "{{" + name + "}}"
        out, at = [], 0
        for m in token.finditer(value):
            kind, found = kinds[(m.lastindex or 1) - 1][0], m.group(0)
            out.append(value[at : m.start()])
            if kind in ("reference", "braces"):
                out.append(found.replace("{{", "{{{{"))
            else:
                name = found[2:-2] if kind == "declared" else by_value[found]
                occurrences.setdefault(name, []).append(where)
                out.append("{{" + name + "}}")
            at = m.end()
        out.append(value[at:])
        return "".join(out)

    data = _rewrite(_plan_data(plan), leaf)
    missing = [n for n in values if n not in occurrences]
    if missing:
        shown = ", ".join(f"{n}={_show(values[n])}" for n in missing)
        raise TemplateError(f"no text of the plan holds the value of {shown}", rule="value_not_found", names=missing)
    absent = [n for n in declared if n not in occurrences]
    if absent:
        raise TemplateError(
            f"the plan has no placeholder {', '.join('{{' + n + '}}' for n in absent)}", rule="placeholder_missing", names=absent
        )
    return data, {n: occurrences[n] for n in placeholders(data)}


def save_run_template(
    store: RunStore, run_id: str, name: str, *, values: Mapping[str, Any], declared: Sequence[str] = (), description: str = ""
) -> SavedTemplate:
    """Save the latest approved plan version of run `run_id` as the next version of template `name`.

    The run must have a stored plan (`TemplateError` naming it otherwise;
    `RunNotFoundError` for an unknown run). A version whose plan approval
    was denied or is still pending is passed over. The template must give
    back the run's plan when filled in with the same values.
    """
    versions = store.plan_versions(run_id)
    if not versions:
        raise TemplateError(f"run {run_id!r} has no stored plan to save", rule="no_plan", template=run_id)
    states: dict[str, ApprovalState] = {a.content_hash: a.state for a in store.approvals(run_id) if a.step_id is None}
    chosen = next(
        (v for v in reversed(versions) if states.get(v.plan.content_hash, ApprovalState.APPROVED) is ApprovalState.APPROVED), None
    )
    if chosen is None:
        raise TemplateError(
            f"run {run_id!r} has no approved plan version (its plans are pending or denied)", rule="not_approved", template=run_id
        )
    data, occurrences = make_template(chosen.plan, values, declared)
    filled = {**values, **{n: "{{" + n + "}}" for n in declared}}
    draft = Template(name=name, version=0, plan=data, params=list(occurrences), created_at=datetime.now(UTC))
    if instantiate(draft, filled).content_hash != chosen.plan.content_hash:
        raise TemplateError(
            f"the template would not give back the plan of run {run_id!r} with the same values (a value overlaps a step reference?)",
            rule="not_reproduced", template=run_id, names=list(values),
        )  # fmt: skip
    try:
        template = store.save_template(name, data, params=list(occurrences), description=description, source_run_id=run_id)
    except ValueError as exc:
        raise TemplateError(str(exc), rule="bad_name", template=name) from None
    return SavedTemplate(template=template, run_id=run_id, plan_version=chosen.version, occurrences=occurrences)


# --- filling a template in -------------------------------------------------------


def instantiate(template: Template, values: Mapping[str, Any], registry: Registry | None = None) -> Plan:
    """The plan of `template` with `values` filled in, checked with `check_plan` (against `registry` when given).

    Missing, extra or undeclared parameters are a `TemplateError` naming
    them and the template. The plan id is the template's name and version
    and a short hash of the values; the plan is a version 1.
    """
    label = f"{template.name!r} v{template.version}"
    used = placeholders(template.plan)
    undeclared = [n for n in used if n not in template.params]
    if undeclared:
        raise TemplateError(
            f"template {label} uses undeclared placeholders: {', '.join(undeclared)}",
            rule="undeclared_placeholder",
            template=template.name,
            names=undeclared,
        )
    missing = [n for n in template.params if n not in values]
    extra = [n for n in values if n not in template.params]
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
        declared = ", ".join(template.params) or "none"
        raise TemplateError(
            f"template {label} takes parameters {declared}: {'; '.join(parts)}",
            rule="missing_parameters" if missing else "extra_parameters", template=template.name, names=missing + extra,
        )  # fmt: skip

    def leaf(value: Any, where: str, in_step: bool) -> Any:
        if not isinstance(value, str):
            return _KEEP
        pieces = _pieces(value)
        if not any(is_name for is_name, _ in pieces):
            return "".join(text for _, text in pieces)
        if in_step and len(pieces) == 1 and _in_parameters(where):  # a whole parameter value keeps its type
            return _literal(values[pieces[0][1]])
        out = "".join(_as_text(values[t], in_step) if is_name else t for is_name, t in pieces)
        if in_step:
            expected = find_references("".join(" " if is_name else t for is_name, t in pieces))
            if find_references(out) != expected:
                names = [t for is_name, t in pieces if is_name]
                raise TemplateError(
                    f"template {label}: at {where} the value of {', '.join(names)} would join the text around it into a step reference",
                    rule="reference", template=template.name, names=names,
                )  # fmt: skip
        return out

    data = _rewrite(template.plan, leaf)
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    suffix = f"-v{template.version}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"
    data.update(plan_id=template.name[: 200 - len(suffix)] + suffix, version=1, revises=None)
    return check_plan(Plan.from_data(data), registry)


# --- versions ---------------------------------------------------------------------


def diff_templates(old: Template, new: Template) -> TemplateDiff:
    """What changed from `old` to `new` (two versions of one template): parameters, steps, and each changed field."""
    a, b = (Plan.from_data({**t.plan, "version": t.version, "revises": None}) for t in (old, new))
    steps = diff_plans(a, b)
    da, db = (p.model_dump(mode="json", by_alias=True) for p in (a, b))
    changes = [FieldChange(step_id=None, field=f, old=da.get(f), new=db.get(f)) for f in _PLAN_FIELDS if da.get(f) != db.get(f)]
    for sid, fields in steps.changed.items():
        before, after = _dump_step(a, sid), _dump_step(b, sid)
        for f in fields:
            if f == "parameters":
                keys = list(dict.fromkeys([*before[f], *after[f]]))
                changes += [FieldChange(step_id=sid, field=f"parameters.{k}", old=before[f].get(k), new=after[f].get(k))
                            for k in keys if before[f].get(k) != after[f].get(k)]  # fmt: skip
            else:
                changes.append(FieldChange(step_id=sid, field=f, old=before.get(f), new=after.get(f)))
    return TemplateDiff(
        name=new.name,
        old_version=old.version,
        new_version=new.version,
        plan=steps,
        params_added=[p for p in new.params if p not in old.params],
        params_removed=[p for p in old.params if p not in new.params],
        changes=changes,
    )


# --- small parts ------------------------------------------------------------------


def _check_names(names: Iterable[str]) -> None:
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise TemplateError(
            f"parameter names are letters, digits, '_' and '-': not {', '.join(map(repr, bad))}", rule="bad_assignment", names=bad
        )


def _plan_data(plan: Plan) -> dict[str, Any]:
    data = plan.model_dump(mode="json", by_alias=True, exclude={"content_hash"})
    data.update(version=1, revises=None)
    return data


def _dump_step(plan: Plan, step_id: str) -> dict[str, Any]:
    return plan.step(step_id).model_dump(mode="json", by_alias=True)


def _in_parameters(where: str) -> bool:
    return ".parameters." in where  # a value inside a step's parameters (step ids hold no dot)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _escape(text: str) -> str:
    """A literal text for a step field: every ``${`` that would be read (a reference or ``$${``) gets one more ``$``."""
    return re.sub(_REFERENCE, lambda m: "$" + m.group(0), text)


def _literal(value: Any) -> Any:
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, list):
        return [_literal(v) for v in value]
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    return value


def _as_text(value: Any, in_step: bool) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return _escape(text) if in_step else text


def _show(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
