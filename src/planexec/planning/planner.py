"""The planner: a goal and the registry's catalog -> a validated `Plan`, with repair.

Owns `Planner`, `Planning` (the plan and how it was reached) and `PlanDraft`
(one attempt: what the model wrote, its problems, its usage). The model
writes in the restricted schema of `plan_schema` (workers and actions are
enums, so even a small model cannot name a tool that does not exist); a
draft that fails to parse or validate goes back to the model with its
problems, up to `max_repairs` times; then `PlanningError` shows the last
draft and its problems. Requests carry a seed and temperature 0 by default,
so a provider that honours them plans deterministically.
`plan_format` picks what the model writes: the JSON draft, or the compact
form (`plan.compact`: one line per step, about a third of the output
tokens), read, validated and repaired the same way (`compact_form`).
`Planner.stream` (in `plan_stream`) hands out steps while the model writes.
Prompts are files under ``prompts/planner/``; the stable part of a
prompt (rules, catalog, examples) comes before the goal and is the same for
every goal, so providers' prompt caches serve it (see `Planner.messages`). Imports `plan`,
`plan_schema`, `compact_form`, `validation`, `registry`, `records`, `usage`, `errors`, `toolcalls` (its prompt loader) and
`models.base`; never the engine.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, Literal

from planexec.errors import ModelOutputError, PlanningError, PlanParseError, Problem
from planexec.models.base import Message, Model, ModelRequest
from planexec.models.profile import profile_of
from planexec.plan.drafts import PlanDraft, Planning
from planexec.plan.model import Plan
from planexec.plan.validation import validate_plan
from planexec.planning.compact_form import check_compact, compact_example, reviewers_fields
from planexec.planning.draft_schema import (
    draft_grammar,
    draft_schema,
    draft_to_plan_data,
    free_tasks,
    granting_workers,
    plan_id_for,
    planning_actions,
)
from planexec.usage import Usage
from planexec.workers.registry import Registry
from planexec.workers.tool_calls import prompt_file

__all__ = ["PlanDraft", "Planner", "Planning", "load_prompt", "render_catalog"]


def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>`` shipped in the package (markers not filled)."""
    return prompt_file(*name.split("/"))


def _type_of(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(_type_of(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(schema.get('items') or {})}"
    return str(kind)


def render_catalog(catalog: list[dict[str, Any]], *, compact: bool = False) -> str:
    """The registry's catalog as the short text a planner reads: one line per (worker, action).

    With `compact`, each action is shown as the compact form calls it:
    ``search(query: string)`` for a tool (under no worker line: a tool is
    called by its name), ``writer.write: "task"`` for a task in words, and
    only the first paragraph of a description, on one line: the catalogue
    is most of a compact prompt, and the rest of a docstring (a
    calculator's list of functions) is for the worker that calls the tool.
    """
    lines = []
    for worker in catalog:
        if not (compact and worker["name"] == "tool"):
            lines.append(f"- worker {worker['name']}: {worker['description']}")
        for action in worker["actions"]:
            params = action["parameters"]
            props = params.get("properties")
            text = action["description"] or ""
            if compact:
                text = " ".join(text.split("\n\n", 1)[0].split())
            about = f" - {text}" if text else ""
            if props is None:
                signature = "input: string (optional): the text the task works on; may quote earlier results"
            else:
                required = set(params.get("required", []))
                signature = ", ".join(f"{name}: {_type_of(p)}{'' if name in required else ' (optional)'}" for name, p in props.items())
            if not compact:
                lines.append(f"    action {action['name']}({signature}){about}")
            elif props is None:
                lines.append(f'    {worker["name"]}.{action["name"]}: "the task in words"{about}')
            else:
                target = action["name"] if worker["name"] == "tool" else f"{worker['name']}.{action['name']}"
                lines.append(f"    {target}({signature}){about}")
    return "\n".join(lines)


_WORD = re.compile(r"[a-z0-9]+")


def _overlap(a: str, b: str) -> int:
    return len(set(_WORD.findall(a.lower())) & set(_WORD.findall(b.lower())))


def _json_example(plan: dict[str, Any], goal: str) -> str:
    return json.dumps(plan, ensure_ascii=False)


def _json_example_naming_the_answer(plan: dict[str, Any], goal: str) -> str:
    """A shipped example plan as a model that names its answer writes it: the last step is the answer."""
    steps = plan.get("steps") or []
    named = {**plan, "answer_step": steps[-1]["id"]} if steps and "answer_step" not in plan else plan
    return json.dumps(named, ensure_ascii=False)


def _example_turns(
    examples: list[dict[str, Any]],
    pairs: set[str],
    goal: str,
    *,
    nearest_last: bool,
    render: Callable[[dict[str, Any], str], str] = _json_example,
) -> tuple[str, list[Message]]:
    """Few-shot examples: those whose actions all exist become earlier turns of the conversation
    (small models imitate turns best), in their own order, or with `nearest_last` the one most like
    the goal last, since a small model copies the nearest; when none fits, the others are shown in
    the system prompt as examples with other tools."""
    fitting = [ex for ex in examples if set(ex["uses"]) <= pairs]
    if nearest_last:
        fitting.sort(key=lambda ex: _overlap(ex["goal"], goal))
    if fitting:
        turns = []
        for ex in fitting:
            turns.append(Message(role="user", content=f"Goal: {ex['goal']}"))
            turns.append(Message(role="assistant", content=render(ex["plan"], ex["goal"])))
        return "", turns
    shown = [f"Tools: {ex['catalog']}\nGoal: {ex['goal']}\nPlan: {render(ex['plan'], ex['goal'])}" for ex in examples if "catalog" in ex]
    return "\nExamples (they use other tools than yours):\n" + "\n\n".join(shown) + "\n", []


class Planner:
    """Turns goals into validated plans over a registry's workers.

    `max_steps` bounds a plan; `max_repairs` how many times problems go back
    to the model; `examples` replace the shipped few-shot examples (an
    example is shown as an earlier turn when every action it uses exists); `positional` picks the schema shape (default: positional
    when the model's profile says it decodes under a grammar, see `plan_schema`); `workers`
    restricts which workers it may use. Every default below is read from
    the model's profile (`models.profile`), never guessed from its class or
    its ``base_url``. `write_grants` teaches the model to
    give role steps capabilities and typed answers (``output_schema``);
    by default on for a capable model, off for a small one or one under a
    grammar, which plan worse with the longer prompt.
    `name_answer` asks a JSON draft to name the step whose result answers
    the goal (``answer_step``; a run whose plan names it needs no joiner
    call), by default for those same capable models: SmolLM2 wrote plans of
    3-6 steps instead of 1-3 when asked (a compact plan marks its answer
    line in any case).
    `nearest_example_last` puts the example turn most like the goal last, which
    a small model copies; by default on for a small model, off for a
    capable one, whose prompt then starts with the same system message and
    example turns for every goal, a prefix its provider caches.
    `plan_format` is what the model writes: ``"json"`` (the draft schema)
    or ``"compact"`` (one line per step, `plan.compact`; by default when
    the profile says the model writes it well, as hosted models do; no
    output schema is sent, and `grammar` is its GBNF for a caller that
    decodes under a grammar itself).
    """

    def __init__(
        self,
        model: Model,
        registry: Registry,
        *,
        max_steps: int = 8,
        max_repairs: int = 2,
        seed: int | None = 0,
        temperature: float | None = 0.0,
        max_tokens: int | None = 2048,
        positional: bool | None = None,
        workers: list[str] | None = None,
        examples: list[dict[str, Any]] | None = None,
        write_grants: bool | None = None,
        nearest_example_last: bool | None = None,
        plan_format: Literal["json", "compact"] | None = None,
        name_answer: bool | None = None,
    ) -> None:
        if max_repairs < 0:
            raise ValueError("max_repairs must be 0 or more")
        self.profile = profile_of(model)
        plan_format = plan_format or self.profile.plan_format
        if plan_format not in ("json", "compact"):
            raise ValueError(f"plan_format must be 'json' or 'compact', not {plan_format!r}")
        self.plan_format: Literal["json", "compact"] = plan_format
        self.model = model
        self.registry = registry
        self.max_steps = max_steps
        self.max_repairs = max_repairs
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.positional = self.profile.grammar if positional is None else positional
        self.workers = workers
        # few-shot examples: {"uses": ["worker.action", ...], "goal", "plan", "catalog"?}; shipped ones by default
        self.examples = examples if examples is not None else json.loads(load_prompt("planner/examples.json"))
        # whether the prompt and schema teach capabilities and typed answers: a capable model's by default; a small model
        # (its profile says so: the embedded one, or one planexec.toml marks small) or one under a grammar plans worse with it
        small = self.positional or self.profile.small
        self.write_grants = not small if write_grants is None else write_grants
        # the same small models copy the nearest example; a capable model's provider caches a prompt that starts the same
        self.nearest_example_last = small if nearest_example_last is None else nearest_example_last
        self.name_answer = (not small) if name_answer is None else name_answer
        self.schema = draft_schema(
            registry, max_steps=max_steps, positional=self.positional, workers=workers, grants=self.write_grants, answer=self.name_answer
        )

    def __repr__(self) -> str:
        return f"Planner({self.model.name!r}, max_steps={self.max_steps}, max_repairs={self.max_repairs})"

    @cached_property
    def grammar(self) -> str:
        """The GBNF grammar of a compact plan over this planner's catalog (`draft_schema.draft_grammar`)."""
        return draft_grammar(self.registry, max_steps=self.max_steps, workers=self.workers)

    @property
    def compact(self) -> bool:
        """True when the model writes the compact form."""
        return self.plan_format == "compact"

    def messages(self, goal: str) -> list[Message]:
        """The opening conversation: the system prompt (rules, catalog), few-shot examples, and the goal.

        Stable first, for providers' prompt caches: the system message depends on the
        registry and settings only (never the goal), and the example turns too unless
        `nearest_example_last`; the goal comes last.
        """
        catalog = []
        for w in self.registry.catalog():
            if self.workers is None or w["name"] in self.workers:
                allowed = set(planning_actions(self.registry.workers[w["name"]]))
                catalog.append({**w, "actions": [a for a in w["actions"] if a["name"] in allowed]})
        pairs = {f"{w['name']}.{a['name']}" for w in catalog for a in w["actions"]}
        render = compact_example if self.compact else (_json_example_naming_the_answer if self.name_answer else _json_example)
        shown, turns = _example_turns(self.examples, pairs, goal, nearest_last=self.nearest_example_last, render=render)
        # hosted planners may grant tools to roles; a grammar-bound small model, or a plan of tools only, reads none of it
        prefix = "compact_" if self.compact else ""
        granting = self.write_grants and granting_workers(self.registry)
        contract = "\n" + prompt_file("planner", f"{prefix}contract.md") if granting else ""
        system = prompt_file(
            "planner",
            "compact.md" if self.compact else "system.md",
            catalog=render_catalog(catalog, compact=self.compact),
            max_steps=str(self.max_steps),
            examples=shown,
            contract=contract,
            answer_key=', "answer_step": "..."' if self.name_answer else "",
            answer_rule='"answer_step" is the id of the step whose result answers the goal.'
            if self.name_answer
            else "The last step's result is the answer.",
        )
        return [Message(role="system", content=system), *turns, Message(role="user", content=f"Goal: {goal}")]

    def asked(self, planning: Planning, *, reused: bool = False) -> dict[str, Any]:
        """What this planner was asked for `planning`'s plan, as a run records it (``RunStarted.setup["planner"]``, read by
        `export_training`): its model, the format and the opening conversation (the system prompt with the catalogue as it
        is now, the example turns, the goal). For a template's plan (`reused`), what it would have been asked; empty for a
        plan no planner wrote. ``trusted_tools`` and ``untrusted_tools`` name the registry's tools by whether their
        output (and so their error messages) may carry words from outside: a replanner that read the failure of an
        untrusted one read such words, which an export leaves out."""
        if planning.prompt:
            return {"model": self.model.name, "format": planning.plan_format, "prompt": planning.prompt, **self._trust()}
        return self.asked_for(planning.plan.goal) if reused else {}

    def asked_for(self, goal: str) -> dict[str, Any]:
        """`asked` for a goal this planner is asked now (a streamed plan's): its opening conversation for `goal`."""
        prompt = [{"role": m.role, "content": m.content} for m in self.messages(goal)]
        return {"model": self.model.name, "format": self.plan_format, "prompt": prompt, **self._trust()}

    def _trust(self) -> dict[str, list[str]]:
        tools = self.registry.tools
        return {"trusted_tools": sorted(n for n, t in tools.items() if not t.untrusted_output),
                "untrusted_tools": sorted(n for n, t in tools.items() if t.untrusted_output)}  # fmt: skip

    def request(self, messages: list[Message], *, grammar: str | None = None) -> ModelRequest:
        """One planning call: the conversation so far, the draft schema (for the compact form: its grammar, when the model
        decodes under one; `grammar` replaces the planner's own, a revision's), the seed."""
        if self.compact and grammar is None and self.profile.grammar:
            grammar = self.grammar
        return ModelRequest(
            messages=messages,
            output_schema=None if self.compact else self.schema,
            grammar=grammar if self.compact else None,
            temperature=self.temperature,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    def check(self, text: str, goal: str, plan_id: str) -> tuple[Plan | None, list[Problem]]:
        """Read a draft: the plan when it parses and validates, else its problems (a compact draft's name their lines)."""
        if self.compact:
            return check_compact(text, goal=goal, plan_id=plan_id, registry=self.registry, free=free_tasks(self.registry))
        try:
            draft = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, [Problem("malformed_json", f"the plan is not JSON: {exc.msg} at column {exc.colno}")]
        try:
            plan = Plan.from_data(draft_to_plan_data(draft, goal, plan_id=plan_id, free=free_tasks(self.registry)))
        except PlanParseError as exc:
            return None, exc.problems
        problems = [*reviewers_fields(plan.steps), *validate_plan(plan, self.registry)]
        return (None, problems) if problems else (plan, [])

    async def draft(self, goal: str, *, plan_id: str | None = None, note: str | None = None) -> Planning:
        """Plan `goal`, repairing as needed; the plan with every draft, or `PlanningError`. `note` is trusted context read
        after the goal (what a single agent did before it handed the goal over); the plan's goal stays `goal`."""
        plan_id = plan_id or plan_id_for(goal)
        messages = self.messages(goal)
        if note:
            messages[-1] = Message(role="user", content=f"{messages[-1].content}\n\n{note}")
        return await self.attempts(messages, lambda text: self.check(text, goal, plan_id), goal=goal)

    async def attempts(
        self,
        messages: list[Message],
        check: Callable[[str], tuple[Plan | None, list[Problem]]],
        *,
        goal: str,
        schema: dict[str, Any] | None = None,
        grammar: str | None = None,
    ) -> Planning:
        """The repair loop: ask, `check` the text, send its problems back, up to `max_repairs` times.

        `schema` replaces the draft schema, `grammar` the compact grammar (a revision's, see `replanning`).
        Returns the accepted plan with every draft, or raises `PlanningError`.
        """
        drafts: list[PlanDraft] = []
        usage = Usage()
        opening = [{"role": m.role, "content": m.content} for m in messages]
        for attempt in range(1, self.max_repairs + 2):
            t0 = time.perf_counter()
            try:
                request = self.request(messages, grammar=grammar)
                if schema is not None:
                    request = request.model_copy(update={"output_schema": schema})
                response = await self.model.complete(request)
                text, cost = response.text, response.usage
            except ModelOutputError as exc:  # it answered, off-schema: a draft to repair, not a dead end
                text, cost = exc.text, exc.usage if isinstance(exc.usage, Usage) else Usage(model_calls=1)
                problems: list[Problem] = [Problem("schema_mismatch", str(exc))]
                plan = None
                if text:
                    plan, problems = check(text)
                    problems = problems or [Problem("schema_mismatch", str(exc))]
            else:
                plan, problems = check(text)
                if plan is None and response.finish_reason == "length":
                    # a cut-off draft is not worth repairing line by line: ask for a shorter plan
                    problems = [
                        Problem(
                            "cut_off", f"the plan was cut off at {self.max_tokens} tokens; write a shorter plan: fewer steps, shorter texts"
                        )
                    ]
            usage = usage + cost
            drafts.append(
                PlanDraft(
                    attempt=attempt,
                    model=self.model.name,
                    text=text,
                    problems=[p.render() for p in problems],
                    usage=cost,
                    wall_time=time.perf_counter() - t0,
                    content_hash=plan.content_hash if plan is not None and not problems else "",
                )
            )
            if plan is not None and not problems:
                return Planning(plan=plan, drafts=drafts, usage=usage, prompt=opening, plan_format=self.plan_format)
            shown = text if not (problems and problems[0].rule == "cut_off") else text[:400] + " …(cut off)"
            messages = [
                *messages,
                Message(role="assistant", content=shown),
                Message(
                    role="user",
                    content=prompt_file(
                        "planner",
                        "compact_repair.md" if self.compact else "repair.md",
                        problems="\n".join(f"- {p.render()}" for p in problems),
                    ),
                ),
            ]
        raise PlanningError(
            f"planner {self.model.name} wrote no valid plan for {goal!r} in {len(drafts)} attempt(s)",
            model=self.model.name,
            attempts=len(drafts),
            problems=problems,
            last_text=text,
            usage=usage,
        )

    async def plan(self, goal: str, *, plan_id: str | None = None) -> Plan:
        """The validated plan for `goal` (see `draft` for the attempts)."""
        return (await self.draft(goal, plan_id=plan_id)).plan
