"""Plan reuse (agentic plan caching): a goal that fits a saved template gets the template's plan, filled in, instead of a new one.

Owns `Reuse` (where a plan came from: the template, its version, the values,
the matcher and what choosing cost, or why the planner was called instead),
`ReusePlanning` (a `Planning` that carries it), the two matchers, and
`plan_with_reuse`, the step `Team.plan` takes before it asks the planner:

1. **rules** (`match_rules`): a template's goal, each ``{{placeholder}}``
   read as a capture, must fit the whole goal; the literal text compares
   regardless of case, of runs of whitespace and of a closing ``.``, ``?``
   or ``!``. A placeholder that fills a whole step parameter whose schema is
   not a string (an ``integer``, a list ...) reads its capture as JSON. No
   model call. Of several fits the most specific (the longest literal text)
   wins.
2. **model** (`choose_request`, `read_choice`): when no rule fits, a cheap
   model (the team's workers' model, not the planner) is shown the goal and
   the `k` templates whose goals share the most words with it (at least half
   of a template's words), and answers ``{"template": NAME, "values":
   {...}}`` or ``{"template": "none"}``. The answer is read strictly: an
   unknown template, a missing or unknown parameter, a value of the wrong
   type, or a value the goal does not contain (a model may not invent one)
   is refused.

The chosen template is filled in with `instantiate` (a value never becomes
a step reference or a placeholder) and validated against the registry; the
plan's goal is the goal as given. When nothing fits, the model refuses,
fails or answers badly, or the filled plan does not validate, the planner
plans as usual and the `Reuse` record says why (`fallback`). Either way the
plan goes on to the team's review (policies, reviewer) like any other.

Every template takes part, the latest version of each name (a template has
no flag of its own; ``reuse = false`` turns reuse off). A template whose goal
has no literal word, or two placeholders with nothing between them, can be
chosen only by the model. Making templates from runs is `library.learning`'s.

Imports `library.templates`, `planning.planner`, `plan`, `models.base`,
`store.base`, `workers`, `records`, `usage` and `errors`; never the engine,
the team or a face.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import ModelError, PlanError, PlanningError
from planexec.library.templates import PARAM_NAME, instantiate
from planexec.models.base import Message, Model, ModelRequest
from planexec.models.profile import profile_of
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan
from planexec.planning.planner import Planner
from planexec.records import Record
from planexec.store.base import Template
from planexec.usage import Usage
from planexec.workers.registry import Registry
from planexec.workers.tool_calls import prompt_file

__all__ = [
    "CANDIDATES",
    "MATCHERS",
    "Reuse",
    "ReusePlanning",
    "TemplateShelf",
    "candidates",
    "choice_schema",
    "choose_request",
    "find_reuse",
    "goal_spans",
    "latest_templates",
    "match_rules",
    "matchers_of",
    "plan_with_reuse",
    "read_choice",
    "reuse_overhead",
]

MATCHERS: tuple[str, ...] = ("rules", "model")
CANDIDATES = 3  # templates a model is shown: few, so the call stays short
CHOICE_MAX_TOKENS = 256  # a name and a few values
VALUE_MAX_CHARS = 200  # a value is part of the goal; a bound keeps a small model under a grammar from rambling in a string
SPAN_WORDS = 4  # a text value is a run of at most this many of the goal's words ...
SPANS_MAX = 120  # ... offered as an enum when the goal has no more runs than this (else any text, checked after)
_EDGE = re.compile(r"^[\"'(\[]+|[\"'),.;:!?\]]+$")

_PLACEHOLDER = re.compile(r"\{\{\{\{|\{\{(" + PARAM_NAME + r")\}\}")  # templates.py's syntax: "{{{{" is a literal "{{"
_WHOLE = re.compile(r"^\{\{(" + PARAM_NAME + r")\}\}$")
_END = re.compile(r"[\s.?!]+$")
_WORD = re.compile(r"[a-z0-9]+")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reuse(Record):
    """What the plan library did for a goal: the template it filled in, or why the planner was called (`fallback`).

    `matcher` is ``rules`` (no model call) or ``model`` (`model` chose among
    `candidates`; `usage` and `wall_time` are that call's).
    """

    template: str | None = None
    version: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    matcher: Literal["rules", "model"] | None = None
    model: str | None = None
    candidates: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    wall_time: float = 0.0
    fallback: str | None = None

    @property
    def reused(self) -> bool:
        """True when the plan is the template's, filled in: the planner was not called."""
        return self.fallback is None and self.template is not None

    def describe(self) -> str:
        """One line: ``reused template NAME vN (...)`` or ``planned from scratch: <why>``."""
        if self.reused:
            how = "matched by rules, no model call" if self.matcher == "rules" else f"chosen by {self.model}"
            return f"reused template {self.template} v{self.version} ({how})"
        return f"planned from scratch: {self.fallback}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReusePlanning(Planning):
    """A `Planning` with what the plan library did (`reuse`): no drafts when a template's plan was reused.

    Its `usage` counts the choosing call as well as the planner's drafts.
    """

    reuse: Reuse

    @property
    def repairs(self) -> int:
        """Drafts sent back for repair (none when no planner was called)."""
        return max(len(self.drafts) - 1, 0)


@runtime_checkable
class TemplateShelf(Protocol):
    """A store that lists its templates (`RunStore`'s backends do)."""

    def templates(self, name: str | None = None) -> list[Template]:
        """Every saved version, by name then version."""
        ...


def latest_templates(store: object) -> list[Template]:
    """The latest version of every template in `store` (none for a store that keeps no templates, or None)."""
    if not isinstance(store, TemplateShelf):
        return []
    latest: dict[str, Template] = {}
    for t in store.templates():  # by name, then version: the last of a name is its latest
        latest[t.name] = t
    return list(latest.values())


def matchers_of(setting: bool | Iterable[str] | None) -> tuple[str, ...]:
    """The matchers a ``reuse`` setting turns on: True or None both, False none, or the names given (`ValueError` naming an unknown one)."""
    if setting is None or setting is True:
        return MATCHERS
    if setting is False:
        return ()
    names = (setting,) if isinstance(setting, str) else tuple(setting)
    unknown = [n for n in names if n not in MATCHERS]
    if unknown:
        raise ValueError(f"reuse: unknown matcher(s) {', '.join(map(repr, unknown))}; choose from {', '.join(MATCHERS)}, or true/false")
    return tuple(dict.fromkeys(names))


def reuse_overhead(planning: Planning | None, overhead: Mapping[str, Usage] | None) -> dict[str, Usage]:
    """`overhead` with the choosing call of a reuse (role ``reuse``), so a run counts what its plan cost."""
    out = dict(overhead or {})
    if isinstance(planning, ReusePlanning) and not planning.reuse.usage.is_zero():
        out["reuse"] = out.get("reuse", Usage()) + planning.reuse.usage
    return out


# --- the rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pattern:
    """A template's goal as a regular expression: `groups` maps each group to its parameter; `literal` is the rest."""

    regex: re.Pattern[str]
    groups: dict[str, str]
    literal: str


def _normal(text: str) -> str:
    return _END.sub("", " ".join(text.split()))


def _pieces(text: str) -> list[tuple[bool, str]]:
    """A template text as (is_placeholder, name or literal text) pieces, adjacent literals joined, ``{{{{`` read as ``{{``."""
    pieces: list[tuple[bool, str]] = []
    at = 0
    for m in [*_PLACEHOLDER.finditer(text), None]:
        literal = text[at : m.start()] if m is not None else text[at:]
        literal += "{{" if m is not None and m.group(1) is None else ""
        if literal and pieces and not pieces[-1][0]:
            pieces[-1] = (False, pieces[-1][1] + literal)
        elif literal:
            pieces.append((False, literal))
        if m is not None and m.group(1) is not None:
            pieces.append((True, m.group(1)))
        at = m.end() if m is not None else at
    return pieces


def _pattern(goal: str) -> _Pattern | None:
    """The pattern of a template's goal; None when it has no literal word or two placeholders side by side."""
    parts: list[str] = []
    groups: dict[str, str] = {}
    literal: list[str] = []
    pieces = _pieces(_normal(goal))  # normalised: whitespace is single spaces, and only next to a placeholder at either end
    for i, (is_name, text) in enumerate(pieces):
        if not is_name:
            words = text.split()
            body = r"\s+".join(map(re.escape, words))
            parts.append((r"\s+" if text[0].isspace() else "") + body + (r"\s+" if text[-1].isspace() and body else ""))
            literal += words
        elif i and pieces[i - 1][0]:
            return None
        elif text in groups.values():
            parts.append(f"(?P={next(g for g, n in groups.items() if n == text)})")
        else:
            groups[f"p{len(groups)}"] = text
            parts.append(f"(?P<p{len(groups) - 1}>.+?)")
    if not literal:
        return None
    return _Pattern(re.compile("".join(parts), re.IGNORECASE | re.DOTALL), groups, " ".join(literal).lower())


def _is_text(schema: Mapping[str, Any]) -> bool:
    """True when a parameter schema takes a string (or says nothing): its value stays the text the goal holds."""
    if "anyOf" in schema:
        return any(_is_text(s) for s in schema["anyOf"] if isinstance(s, Mapping))
    if "enum" in schema:
        return all(isinstance(v, str) for v in schema["enum"])
    kind = schema.get("type")
    return kind == "string" or (kind is None and "$ref" not in schema)


def _typed(template: Template, registry: Registry | None) -> dict[str, dict[str, Any]]:
    """Each placeholder that is a whole top-level step parameter whose schema is not a string: that schema."""
    out: dict[str, dict[str, Any]] = {}
    steps = template.plan.get("steps")
    for step in steps if isinstance(steps, list) and registry is not None else []:
        params = step.get("parameters") if isinstance(step, dict) else None
        worker = registry.workers.get(str(step.get("worker") or "tool")) if isinstance(params, dict) and registry else None
        action = str(step.get("action"))
        model = worker.input_model(action) if worker is not None and action in worker.actions else None
        props = (model.model_json_schema().get("properties") or {}) if model is not None else {}
        for key, value in (params or {}).items():
            m = _WHOLE.match(value) if isinstance(value, str) else None
            if m is not None and isinstance(props.get(key), dict) and not _is_text(props[key]):
                out.setdefault(m.group(1), props[key])
    return out


def _read_values(template: Template, captured: Mapping[str, str], registry: Registry | None) -> dict[str, Any] | None:
    """The captured texts as values: JSON for a typed parameter; None when one is empty or not JSON."""
    typed = _typed(template, registry)
    values: dict[str, Any] = {}
    for name, text in captured.items():
        text = text.strip()
        if not text:
            return None
        if name in typed:
            try:
                values[name] = json.loads(text)
            except ValueError:
                return None
        else:
            values[name] = text
    return values


def match_rules(goal: str, templates: Sequence[Template], registry: Registry | None = None) -> list[tuple[Template, dict[str, Any]]]:
    """Every template whose goal fits `goal` (see the module docstring), with the values read from it; the most specific first.

    A template whose placeholders are not all its declared parameters does not fit.
    """
    text = _normal(goal)
    fits: list[tuple[int, float, Template, dict[str, Any]]] = []
    for t in templates:
        goal_of = t.plan.get("goal")
        pattern = _pattern(goal_of) if isinstance(goal_of, str) else None
        m = pattern.regex.fullmatch(text) if pattern is not None else None
        if pattern is None or m is None or sorted(pattern.groups.values()) != sorted(t.params):
            continue
        values = _read_values(t, {name: m.group(g) for g, name in pattern.groups.items()}, registry)
        if values is not None:
            fits.append((-len(pattern.literal), -t.created_at.timestamp(), t, values))
    fits.sort(key=lambda f: (f[0], f[1], f[2].name))
    return [(t, values) for _, _, t, values in fits]


# --- the model ---------------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return set(_WORD.findall(_PLACEHOLDER.sub(" ", text).lower()))


def candidates(goal: str, templates: Sequence[Template], k: int = CANDIDATES) -> list[Template]:
    """The `k` templates whose goals share the largest part of their words with `goal` (at least half of them)."""
    words = _words(goal)
    scored = []
    for t in templates:
        own = _words(str(t.plan.get("goal") or ""))
        shared = len(words & own)
        if own and shared * 2 >= len(own):
            scored.append((-shared / len(own), -shared, t.name, t))
    scored.sort(key=lambda s: s[:3])
    return [s[3] for s in scored[:k]]


def _card(template: Template) -> dict[str, Any]:
    """What a model reads of a template: its name, goal, parameters and steps (a role's step with its instruction)."""
    steps = []
    for s in template.plan.get("steps") or []:
        if isinstance(s, dict):
            worker = s.get("worker") or "tool"
            shown = {"action": s.get("action"), "parameters": s.get("parameters") or {}}
            steps.append(shown if worker == "tool" else {"worker": worker, **shown, "instruction": s.get("instruction", "")})
    return {"template": template.name, "goal": template.plan.get("goal"), "parameters": template.params, "steps": steps}


def goal_spans(goal: str, *, longest: int = SPAN_WORDS, limit: int | None = None) -> list[str] | None:
    """The runs of one to `longest` words of `goal`, as written there (quotes and closing punctuation off the ends), in the
    goal's order: text values `read_choice` takes (each is in the goal). None as soon as there are more than `limit`."""
    words = goal.split()
    spans: dict[str, None] = {}
    for i in range(len(words)):
        for j in range(i + 1, min(i + longest, len(words)) + 1):
            span = _EDGE.sub("", " ".join(words[i:j]))
            if span:
                spans.setdefault(span, None)
                if limit is not None and len(spans) > limit:
                    return None  # a long goal: stop here, never build every run of it
    return list(spans)


def choice_schema(
    shortlist: Sequence[Template], registry: Registry | None = None, *, max_length: int = VALUE_MAX_CHARS, goal: str | None = None
) -> dict[str, Any]:
    """The answer's schema: a template name of the shortlist (or ``none``) and values, one shape per template.

    With a `goal` (given for a model that decodes under a grammar, see
    `choose_request`), a text value is one of its runs of up to
    `SPAN_WORDS` words (`goal_spans`: the model then cannot make one up)
    when it has at most `SPANS_MAX` of them; else a text of at most
    `max_length`. A typed one has its parameter's schema.
    """
    shapes: list[dict[str, Any]] = []
    spans = goal_spans(goal, limit=SPANS_MAX) if goal is not None else None
    text = {"enum": spans} if spans else {"type": "string", "maxLength": max(1, max_length)}
    for t in shortlist:
        typed = _typed(t, registry)
        props = {p: typed[p] if p in typed and "$ref" not in json.dumps(typed[p]) else text for p in t.params}
        shapes.append({"type": "object", "properties": props, "required": list(t.params), "additionalProperties": False})
    shapes.append({"type": "object", "properties": {}, "additionalProperties": False})
    return {
        "type": "object",
        "properties": {"template": {"enum": [t.name for t in shortlist] + ["none"]}, "values": {"anyOf": shapes}},
        "required": ["template", "values"],
        "additionalProperties": False,
    }


def choose_request(goal: str, shortlist: Sequence[Template], registry: Registry | None = None, *, spans: bool = False) -> ModelRequest:
    """The one choosing call: ``prompts/reuse/system.md``, the goal and one JSON line per template, `choice_schema`.

    `spans` (for a model that decodes under a grammar): text values from the goal's runs of words only; a hosted
    model may write any text (a value of more words, part of a word), which `read_choice` checks is in the goal.
    """
    cards = "\n".join(json.dumps(_card(t), ensure_ascii=False) for t in shortlist)
    return ModelRequest(
        messages=[
            Message(role="system", content=prompt_file("reuse", "system.md")),
            Message(role="user", content=f"Goal: {goal}\n\nSaved plans:\n{cards}"),
        ],
        output_schema=choice_schema(shortlist, registry, max_length=min(len(goal), VALUE_MAX_CHARS), goal=goal if spans else None),
        temperature=0.0,
        seed=0,
        max_tokens=CHOICE_MAX_TOKENS,
    )


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_choice(
    text: str, shortlist: Sequence[Template], goal: str, registry: Registry | None = None
) -> tuple[Template, dict[str, Any]] | str:
    """The template and values a choosing answer names, or why it is refused (``none`` included); see the module docstring."""
    fenced = _FENCE.match(text.strip())
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return f"the model's answer is not JSON: {_short(text)!r}" if text.strip() else "the model's answer is empty"
    if not isinstance(data, dict) or not isinstance(data.get("template"), str) or set(data) - {"template", "values"}:
        return f'the model\'s answer is not {{"template": NAME, "values": {{...}}}}: {_short(text)!r}'
    name, values = data["template"], data.get("values")
    if name == "none":
        return "the model found no template that fits"
    chosen = next((t for t in shortlist if t.name == name), None)
    if chosen is None:
        return f"the model named template {name!r}, not one of {', '.join(t.name for t in shortlist)}"
    if not isinstance(values, dict):
        return f"the model gave no values for template {name!r}"
    missing = [p for p in chosen.params if p not in values]
    unknown = [p for p in values if p not in chosen.params]
    if missing or unknown:
        said = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
        return (
            f"the model's values for template {name!r} do not fit its parameters ({', '.join(chosen.params) or 'none'}): {'; '.join(said)}"
        )
    typed, haystack = _typed(chosen, registry), _normal(goal).lower()
    for p in chosen.params:
        value = values[p]
        if p not in typed and not isinstance(value, str):
            return f"the model's value of {p} is {type(value).__name__}, not text"
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if not shown.strip() or _normal(shown).lower() not in haystack:
            return f"the model's value of {p} ({_short(shown, 60)!r}) is not in the goal"
    return chosen, dict(values)


# --- reusing --------------------------------------------------------------------------------------


def _with_goal(plan: Plan, goal: str) -> Plan:
    """The plan with `goal` as its goal (a goal is no step field: nothing there is a reference)."""
    if plan.goal == goal:
        return plan
    return Plan.from_data({**plan.model_dump(mode="json", by_alias=True, exclude={"content_hash"}), "goal": goal})


def _fill(goal: str, template: Template, values: dict[str, Any], registry: Registry | None, record: Reuse) -> ReusePlanning | Reuse:
    record = dataclasses.replace(record, template=template.name, version=template.version, values=values)
    try:
        plan = _with_goal(instantiate(template, values, registry), goal)
    except PlanError as exc:  # a template error, or a plan the registry no longer accepts (a tool gone ...)
        why = "; ".join(line.strip(" -") for line in str(exc).splitlines() if line.strip())
        return dataclasses.replace(record, fallback=f"template {template.name} v{template.version} gives no valid plan: {_short(why, 300)}")
    return ReusePlanning(plan=plan, drafts=[], usage=record.usage, reuse=record)


async def find_reuse(
    goal: str,
    templates: Sequence[Template],
    registry: Registry | None,
    *,
    model: Model | None = None,
    matchers: Iterable[str] = MATCHERS,
    k: int = CANDIDATES,
) -> ReusePlanning | Reuse:
    """The plan of the template that fits `goal`, filled in and validated; or a `Reuse` saying why there is none.

    The rules are tried first, then (when `model` is given and ``model`` is
    among `matchers`) one call of `model`. A model error is a reason, not a
    failure.
    """
    on = matchers_of(matchers)
    if not templates:
        return Reuse(fallback="the plan library has no template")
    if "rules" in on:
        fits = match_rules(goal, templates, registry)
        if fits:
            return _fill(goal, *fits[0], registry, Reuse(matcher="rules"))
    if "model" not in on or model is None:
        return Reuse(fallback=f"no template's goal fits this goal ({len(templates)} template(s))")
    shortlist = candidates(goal, templates, k)
    if not shortlist:
        return Reuse(fallback=f"no template fits, and none shares half its words with the goal ({len(templates)} template(s))")
    record = Reuse(matcher="model", model=model.name, candidates=[t.name for t in shortlist])
    t0 = time.perf_counter()
    try:
        spans = profile_of(model).grammar
        response = await model.complete(choose_request(goal, shortlist, registry, spans=spans))
    except ModelError as exc:
        used = getattr(exc, "usage", None)
        return dataclasses.replace(
            record,
            usage=used if isinstance(used, Usage) else Usage(),
            wall_time=time.perf_counter() - t0,
            fallback=f"the model {model.name} failed: {type(exc).__name__}: {_short(str(exc))}",
        )
    record = dataclasses.replace(record, usage=response.usage, wall_time=time.perf_counter() - t0)
    choice = read_choice(response.text, shortlist, goal, registry)
    if isinstance(choice, str):
        return dataclasses.replace(record, fallback=choice)
    return _fill(goal, *choice, registry, record)


async def plan_with_reuse(
    goal: str,
    planner: Planner,
    templates: Sequence[Template],
    *,
    model: Model | None = None,
    matchers: Iterable[str] = MATCHERS,
    k: int = CANDIDATES,
) -> ReusePlanning:
    """`find_reuse`, else `planner.draft(goal)`: a `ReusePlanning` either way (`PlanningError` when the planner gives up).

    The planner's drafts are kept; the usage counts the choosing call too
    (and so does a `PlanningError`'s).
    """
    found = await find_reuse(goal, templates, planner.registry, model=model, matchers=matchers, k=k)
    if isinstance(found, ReusePlanning):
        return found
    try:
        planning = await planner.draft(goal)
    except PlanningError as exc:
        if isinstance(exc.usage, Usage):
            exc.usage = found.usage + exc.usage
        raise
    return ReusePlanning(plan=planning.plan, drafts=planning.drafts, usage=found.usage + planning.usage, reuse=found)
