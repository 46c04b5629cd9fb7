"""Planners compared: the scripted planners that ship, and what a ``--planner`` value names.

Owns `PlannerVariant` and `PLANNER_VARIANTS` (scripted planners: each
goal's oracle as planner, writing the reference solution as its plan, or
that plan with a mistake of the kind real planners make), `ScriptedPlanner`
(the model that plays one), and `PlannerSpec` with `parse_planners` (the
``--planner`` values of ``planexec eval``, checked all at once). A value is
``[LABEL=]PLANNER``; the label (letters, digits, ``_.-``) is what the
tables show, by default the value itself. ``PLANNER`` is one of:

* a scripted planner's name (``oracle``, ``repair``, ``serial``,
  ``stubborn``), under ``--scripted`` only;
* ``PROVIDER:MODEL``, a model as ``--model`` takes it: ``local:/path/x.gguf``,
  ``openai:NAME`` (at ``--base-url``, when given), ``anthropic:NAME``, or a
  provider registered as a plugin;
* ``openai:MODEL@URL``, an OpenAI-compatible server of its own (a
  fine-tuned planner served by vLLM or llama.cpp:
  ``openai:my-ft@http://127.0.0.1:8000/v1``); the URL starts with
  ``http://`` or ``https://``, so a model name may hold an ``@`` of its own.

The mistakes are made on the oracle's plan, so every figure they give is
measured, never written down: ``repair`` misnames an argument in its first
draft and fixes it when the planner's repair prompt lists the problems;
``stubborn`` makes the same mistake in every draft; ``serial`` chains every
step to the one before. Imports `eval.oracle`, `eval.suite`, `models` and
`workers.tool_calls` (the repair prompt it recognises).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from planexec.errors import ConfigError
from planexec.eval.oracle import OracleModel
from planexec.eval.suite import SolutionCall
from planexec.models.base import ModelRequest
from planexec.models.profile import CAPABLE, ModelProfile
from planexec.models.providers import parse_model_name
from planexec.workers.tool_calls import prompt_file

__all__ = ["PLANNER_VARIANTS", "PlannerSpec", "PlannerVariant", "ScriptedPlanner", "parse_planners"]

Steps = list[dict[str, Any]]

_LABEL = re.compile(r"^([A-Za-z0-9_.\-]+)=(.+)$")
# the opening line of the planner's repair prompts (JSON and compact): a request that holds it sends problems back
_REPAIR_OPENINGS = tuple({prompt_file("planner", name, problems="").splitlines()[0] for name in ("repair.md", "compact_repair.md")})


def _misnamed(steps: Steps) -> Steps:
    """The first step that takes arguments names its first one wrongly (``city`` -> ``city_name``); a plan of steps
    without arguments misspells its first tool instead."""
    out = copy.deepcopy(steps)
    for step in out:
        params = step.get("parameters")
        if isinstance(params, dict) and params:
            first = next(iter(params))
            step["parameters"] = {(f"{first}_name" if k == first else k): v for k, v in params.items()}
            return out
    out[0]["action"] = f"{out[0]['action']}s"
    return out


def _chained(steps: Steps) -> Steps:
    """Every step waits for the one before it: the solution's calls, one after another."""
    out = copy.deepcopy(steps)
    for before, step in itertools.pairwise(out):
        if before["id"] not in step["depends_on"]:
            step["depends_on"] = [*step["depends_on"], before["id"]]
    return out


@dataclass(frozen=True)
class PlannerVariant:
    """A scripted planner: its name, what it does, the `mistake` it makes on the oracle's plan (None: none), and whether
    it writes the oracle's plan once the repair prompt lists the problems (`fixed_when_told`)."""

    name: str
    description: str
    mistake: Callable[[Steps], Steps] | None = None
    fixed_when_told: bool = True


PLANNER_VARIANTS: dict[str, PlannerVariant] = {
    v.name: v
    for v in (
        PlannerVariant("oracle", "the reference solution as the plan: valid at once, parallel where the solution is"),
        PlannerVariant("repair", "misnames an argument in its first draft, then writes the solution when told the problems", _misnamed),
        PlannerVariant("serial", "the solution's calls chained one after another: valid, but nothing runs in parallel", _chained),
        PlannerVariant(
            "stubborn", "misnames an argument in every draft: its repairs run out and no plan runs", _misnamed, fixed_when_told=False
        ),
    )
}
"""The scripted planners ``--scripted --planner NAME`` chooses from, by name."""


def _told(request: ModelRequest | None) -> bool:
    """Whether the planner's repair prompt sent a draft's problems back in this request."""
    return request is not None and any(m.role == "user" and m.content.startswith(_REPAIR_OPENINGS) for m in request.messages)


class ScriptedPlanner(OracleModel):
    """The oracle of a goal playing one `PlannerVariant` as planner (every other role stays the oracle's).

    Named ``test:<variant>``, priced like the oracle (free). Stateless: a
    draft is the variant's mistake unless the request carries the repair
    prompt and the variant is `fixed_when_told`.
    """

    def __init__(self, solution: Sequence[SolutionCall], variant: PlannerVariant, *, profile: ModelProfile = CAPABLE) -> None:
        super().__init__(solution, name=f"test:{variant.name}", profile=profile)
        self.variant = variant

    def planned(self, steps: Steps, request: ModelRequest | None) -> Steps:
        """The oracle's steps with the variant's mistake, unless it has been told the problems and fixes them."""
        if self.variant.mistake is None or (self.variant.fixed_when_told and _told(request)):
            return steps
        return self.variant.mistake(steps)


@dataclass(frozen=True)
class PlannerSpec:
    """What one ``--planner`` value names: a scripted planner (`variant`) or a model (`model`, with its own `base_url`)."""

    label: str
    variant: str | None = None
    model: str | None = None
    base_url: str | None = None

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        """The planner itself, whatever its label: two values with one key are one planner given twice."""
        return (self.variant, self.model, self.base_url)


def _scripted_choices() -> str:
    return "; ".join(f"{v.name} ({v.description})" for v in PLANNER_VARIANTS.values())


def _parse(text: str, *, scripted: bool) -> PlannerSpec:
    value = text.strip()
    labelled = _LABEL.match(value)
    label, planner = (labelled[1], labelled[2].strip()) if labelled else (value, value)
    if not planner:
        raise ValueError(f"--planner {text!r}: give a scripted planner's name or a model as PROVIDER:MODEL")
    if ":" not in planner:
        if planner in PLANNER_VARIANTS:
            if not scripted:
                raise ValueError(f"--planner {planner!r} is a scripted planner: add --scripted, or give a model as PROVIDER:MODEL")
            return PlannerSpec(label=label, variant=planner)
        where = "the scripted planners are" if scripted else "with --scripted, the scripted planners are"
        raise ValueError(f"--planner {planner!r} is neither a scripted planner nor PROVIDER:MODEL; {where}: {_scripted_choices()}")
    model, at, url = planner.rpartition("@")
    if not at or not url.startswith(("http://", "https://")):
        model, url = planner, ""
    try:
        provider, _ = parse_model_name(model)
    except ConfigError as exc:
        raise ValueError(f"--planner {planner!r}: {exc}") from None
    if url and provider != "openai":
        raise ValueError(f"--planner {planner!r}: a planner's own URL (@URL) is for openai: models, an OpenAI-compatible server")
    return PlannerSpec(label=label, model=model, base_url=url or None)


def parse_planners(texts: Sequence[str], *, scripted: bool) -> list[PlannerSpec]:
    """The planners the ``--planner`` values name, in order; `ValueError` names the first bad or repeated one.

    `scripted`: whether ``--scripted`` was given (a scripted planner's name
    needs it; a model is taken either way).
    """
    specs: list[PlannerSpec] = []
    for text in texts:
        spec = _parse(text, scripted=scripted)
        for seen in specs:
            if seen.label == spec.label:
                raise ValueError(f"--planner {spec.label!r} is given twice")
            if seen.key == spec.key:
                raise ValueError(f"--planner {text.strip()!r} is the planner {seen.label!r} again")
        specs.append(spec)
    return specs
