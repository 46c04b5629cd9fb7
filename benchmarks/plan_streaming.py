"""Plans streamed into execution: time to the first step started, and to the end, streamed or not.

Two ways to get from a goal to a finished run, timed from the same start:

* non-streamed: ``Planner.draft(goal)`` returns the whole validated plan,
  then ``Engine.start(plan)`` runs it; no step starts before the model's
  last token;
* streamed: ``Engine.start_streaming(PlanStream(planner, goal))``; each
  step joins the running graph once the model has written it (a step is
  handed out once the next one has begun) and starts when its
  dependencies have ended, while the model is still writing the rest.

For each, from the moment planning begins: the plan complete (``draft``
returned; the run's ``PlanCompleted`` event when streamed), the first
``StepStarted``, and ``RunFinished`` (the events' ``at`` times); streamed,
also the first ``PlanStepParsed`` (``PlanStream.parsed_at``). Ratios are
non-streamed / streamed: above 1, streaming is faster.

Two model set-ups:

* ``scripted``: `planexec.testing.ScriptedModel` writes a fixed 10-step plan
  (8 independent ``lookup`` steps, a ``concat`` of the first four, a final
  ``concat`` of that and the other four) at a fixed rate: ``--call-delay``
  seconds before the first token (default 0.5 s, a model's time to first
  token), then one token (a whitespace-separated word) every
  ``--token-delay`` seconds (default 0.02 s: 50 tokens/s). ``lookup``
  sleeps ``--tool-ms`` (default 100 ms);
* ``local``: the embedded SmolLM2-135M (`planexec.models.LocalModel`)
  really plans ``--local-goal`` over a registry of two tools defined here
  (``lookup(key)``, sleeping a deterministic 50-300 ms per key, and
  ``concat(parts, separator)``), with ``--local-max-steps`` (default 10),
  no repair (a streamed plan is never repaired, so both sides make one
  model call), seed 0, temperature 0: the same plan on every repeat. It
  writes what it writes: its step count and actions are reported, and an
  invalid plan is reported as such (the non-streamed side then has no run;
  the streamed side's run fails, possibly after steps have started). Both
  draft shapes of `plan_schema` by default (``--positional
  default,true,false``, each shape once): the planner's own choice for
  this model first, then the positional shape (its grammar makes every
  draft a DAG of earlier steps) and the open one. SmolLM2 writes one
  step for the default goal, so a second goal spells the same plan out
  step by step ("Step 1: look up k1. ... Step 10: concat ..."), planned
  in the planner's default shape only (``--no-spelled`` skips it). Also
  reported: when the streamed call's first token arrived (the prompt
  read) and the model's writing rate after it.

Both set-ups also report, for each step of a streamed plan, how long
after the delta completing its text arrived `PlanStream` handed it out.

Each measurement runs in a fresh event loop; medians over ``--repeats``
(``--local-repeats`` for the local model, whose every call first reads
the ~600-670-token planner prompt: 4-9 s before the first token on idle
CPUs, 25-40 s on shared ones; the local set-up takes some 7 minutes on
idle CPUs, 20 or more on shared ones).

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/plan_streaming.py                      # both set-ups
    python benchmarks/plan_streaming.py --setups scripted    # seconds, no model
    python benchmarks/plan_streaming.py --json
    python benchmarks/plan_streaming.py --setups local --local-repeats 1 --positional false

Exit status 0 whatever the figures, and when the local model writes an invalid plan.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from layered import machine, median, print_result, spread

from planexec import Engine, Registry, RunStatus
from planexec.engine.events import PlanCompleted, PlanStepParsed, RunFinished, StepStarted
from planexec.errors import ModelError, PlanningError
from planexec.models import ModelDelta, stream_response
from planexec.planning.planner import Planner
from planexec.planning.stream import PlanStream
from planexec.testing import ScriptedModel, count_tokens

SETUPS = ("scripted", "local")
LOCAL_GOAL = (
    "Look up the keys k1, k2, k3, k4, k5, k6, k7 and k8 (one lookup step each), "
    "join the first four values into one text, then join that text with the other four values."
)
# the same plan spelled out step by step: SmolLM2 writes ten steps for it, where it writes one for LOCAL_GOAL
LOCAL_GOAL_SPELLED = (
    "Do these steps in order. Step 1: look up k1. Step 2: look up k2. Step 3: look up k3. Step 4: look up k4. "
    "Step 5: look up k5. Step 6: look up k6. Step 7: look up k7. Step 8: look up k8. "
    "Step 9: concat the values of steps 1 to 4. Step 10: concat the value of step 9 with the values of steps 5 to 8."
)


# --- the tools and the scripted plan -------------------------------------------------------------


def lookup_ms(key: str) -> int:
    """The local set-up's lookup latency for `key`: a deterministic 50-300 ms."""
    return 50 + int(hashlib.sha256(key.encode()).hexdigest(), 16) % 251


def build_registry(lookup_latency: Any) -> Registry:
    """A registry of just ``lookup(key)`` (sleeping ``lookup_latency(key)`` seconds) and ``concat(parts, separator)``."""
    registry = Registry()

    @registry.tool
    async def lookup(key: str) -> str:
        """Look up the value stored under a key."""
        await asyncio.sleep(lookup_latency(key))
        return f"value of {key}"

    @registry.tool
    async def concat(parts: list[str], separator: str = " ") -> str:
        """Join texts with a separator."""
        return separator.join(parts)

    return registry


def _step(sid: str, action: str, instruction: str, parameters: dict[str, Any], deps: list[str]) -> dict[str, Any]:
    return {"id": sid, "worker": "tool", "action": action, "instruction": instruction, "parameters": parameters, "depends_on": deps}


def scripted_steps() -> list[dict[str, Any]]:
    """The 10-step plan the scripted model writes: 8 lookups, a concat of the first four, a final concat."""
    steps = [_step(f"s{i}", "lookup", f"Look up the value stored under key k{i}.", {"key": f"k{i}"}, []) for i in range(1, 9)]
    first = [f"s{i}" for i in range(1, 5)]
    rest = [f"s{i}" for i in range(5, 9)]
    steps.append(_step("s9", "concat", "Join the first four values.", {"parts": [f"${{{s}}}" for s in first], "separator": ", "}, first))
    steps.append(
        _step(
            "s10",
            "concat",
            "Join the first four with the other four values.",
            {"parts": ["${s9}", *(f"${{{s}}}" for s in rest)], "separator": "; "},
            ["s9", *rest],
        )
    )
    return steps


def scripted_text(steps: list[dict[str, Any]]) -> tuple[str, dict[str, int]]:
    """The plan's JSON text, and for each step the number of tokens (as the scripted model streams them) up to its end."""
    text = json.dumps({"steps": steps})
    ends: dict[str, int] = {}
    offset = text.index("[") + 1
    for s in steps:
        piece = json.dumps(s)
        offset = text.index(piece, offset) + len(piece)
        # ScriptedModel.stream yields re.findall(r"\s*\S+|\s+$", text): the token holding the step's last character
        ends[s["id"]] = len(re.findall(r"\s*\S+", text[:offset]))
    return text, ends


class TimedModel:
    """A model wrapper that notes when each streamed token reached its reader (`perf_counter`, in `arrivals`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.arrivals: list[float] = []
        self.pieces: list[str] = []

    def __getattr__(self, name: str) -> Any:  # anything else the planner asks of the model (its capabilities)
        return getattr(self.inner, name)

    async def complete(self, request: Any) -> Any:
        """The inner model's `complete`, untouched."""
        return await self.inner.complete(request)

    async def stream(self, request: Any) -> Any:
        """The inner model's stream, each delta's arrival noted."""
        self.arrivals, self.pieces = [], []
        inner = stream_response(self.inner, request)
        try:
            async for item in inner:
                if isinstance(item, ModelDelta):
                    self.arrivals.append(time.perf_counter())
                    self.pieces.append(item.text)
                yield item
        finally:
            await inner.aclose()  # PlanStream closing this stream early must stop the inner model too


def step_ends(text: str) -> list[int]:
    """The offset of the closing brace of each step object in a ``{"steps": [{...}, ...]}`` text."""
    ends, depth, in_string, escaped = [], 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = (False, in_string) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if ch == "}" and depth == 2:  # {"steps": [ {step} ...: a step closes back to the list's depth
                ends.append(i)
    return ends


def handout_lags(t: Timing, pieces: list[str]) -> dict[str, tuple[float, float]]:
    """Per step handed out: when the delta holding its last character arrived, and how long after that PlanStream handed it out."""
    arrived_at, offset = [], 0
    for at, piece in zip(t.arrivals, pieces):
        offset += len(piece)
        arrived_at.append((offset, at))
    out = {}
    for sid, end in zip(t.parsed, step_ends("".join(pieces))):
        at = next(a for o, a in arrived_at if o > end)
        out[sid] = (at, t.parsed[sid] - at)
    return out


# --- one measurement ---------------------------------------------------------------------------------


@dataclass
class Timing:
    """One goal -> finished run, seconds from the start of planning (None: did not happen)."""

    plan_complete: float | None = None
    first_parsed: float | None = None
    first_started: float | None = None
    finished: float | None = None
    status: str = ""
    reason: str | None = None
    steps: int = 0
    actions: list[str] = field(default_factory=list)
    output_tokens: int = 0
    input_tokens: int = 0
    parsed: dict[str, float] = field(default_factory=dict)
    arrivals: list[float] = field(default_factory=list)
    lags: dict[str, tuple[float, float]] = field(default_factory=dict)
    plan_text: str = ""


def _events(history: list[Any], w0: float, t: Timing) -> None:
    started = [e for e in history if isinstance(e, StepStarted)]
    t.first_started = started[0].at.timestamp() - w0 if started else None
    done = [e for e in history if isinstance(e, RunFinished)]
    t.finished = done[-1].at.timestamp() - w0 if done else None


def _written(text: str) -> tuple[int, list[str]]:
    """The steps an invalid draft wrote, as far as its JSON reads."""
    try:
        steps = json.loads(text).get("steps") or []
        return len(steps), [str(s.get("action")) for s in steps if isinstance(s, dict)]
    except (ValueError, AttributeError):
        return 0, []


async def non_streamed(planner: Planner, engine: Engine, goal: str) -> Timing:
    """``Planner.draft`` then ``Engine.start``; an invalid plan ends the measurement with no run."""
    t = Timing()
    # the events' `at` is wall-clock UTC; perf_counter for what the planner reports
    w0, p0 = time.time(), time.perf_counter()
    try:
        planning = await planner.draft(goal)
    except PlanningError as exc:
        t.plan_complete = time.perf_counter() - p0
        t.status, t.reason = "plan invalid", "; ".join(p.render() for p in exc.problems)
        t.input_tokens, t.output_tokens, t.plan_text = exc.usage.input_tokens, exc.usage.output_tokens, exc.last_text
        t.steps, t.actions = _written(exc.last_text)
        return t
    t.plan_complete = time.perf_counter() - p0
    t.steps, t.actions = len(planning.plan.steps), [s.action for s in planning.plan.steps]
    t.input_tokens, t.output_tokens, t.plan_text = planning.usage.input_tokens, planning.usage.output_tokens, planning.drafts[-1].text
    run = engine.start(planning.plan, planning=planning)
    result = await run.result()
    _events(run.history, w0, t)
    t.status, t.reason = result.status.value, result.reason
    return t


async def streamed(planner: Planner, engine: Engine, goal: str) -> Timing:
    """``Engine.start_streaming(PlanStream(...))``: steps run while the model writes."""
    t = Timing()
    stream = PlanStream(planner, goal)
    w0, p0 = time.time(), time.perf_counter()
    run = engine.start_streaming(stream)
    result = await run.result()
    history = run.history
    _events(history, w0, t)
    completed = [e for e in history if isinstance(e, PlanCompleted)]
    t.plan_complete = completed[0].at.timestamp() - w0 if completed else None
    t.parsed = {sid: at - p0 for sid, at in stream.parsed_at.items()}
    t.arrivals = [at - p0 for at in getattr(planner.model, "arrivals", [])]
    if t.arrivals:
        t.lags = handout_lags(t, planner.model.pieces)
    first = [e for e in history if isinstance(e, PlanStepParsed)]
    t.first_parsed = stream.parsed_at[first[0].step_id] - p0 if first else None
    t.status, t.reason = result.status.value, result.reason
    usage = stream.usage if stream.plan is not None else (stream.draft.usage if stream.draft else None)
    if usage is not None:
        t.input_tokens, t.output_tokens = usage.input_tokens, usage.output_tokens
    plan = stream.plan or result.plan
    t.steps, t.actions = len(plan.steps), [s.action for s in plan.steps]
    t.plan_text = stream.draft.text if stream.draft else ""
    if result.status is not RunStatus.SUCCEEDED and t.plan_complete is None:
        t.steps = len(stream.parsed_at)  # the steps that were handed out before the stream failed
    return t


def measure_once(mode: str, make_planner: Any, engine_registry: Registry, goal: str) -> Timing:
    """One measurement in a fresh event loop."""
    runner = non_streamed if mode == "non_streamed" else streamed

    async def go() -> Timing:
        return await runner(make_planner(), Engine(engine_registry, seed=0), goal)

    return asyncio.run(go())


# --- the set-ups ------------------------------------------------------------------------------------

FIGURES = ("plan_complete", "first_parsed", "first_started", "finished")


def _summary(timings: list[Timing]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FIGURES:
        values = [getattr(t, name) for t in timings if getattr(t, name) is not None]
        out[f"{name}_s"] = spread(values) if values else None
    last = timings[-1]
    out.update(
        statuses=[t.status for t in timings],
        reason=last.reason,
        steps=last.steps,
        actions=last.actions,
        input_tokens=last.input_tokens,
        output_tokens=last.output_tokens,
        plan_text=last.plan_text,
    )
    return out


def _ratios(r: dict[str, Any]) -> dict[str, float | None]:
    a, b = r["non_streamed"], r["streamed"]
    out: dict[str, float | None] = {}
    for name in ("first_started", "finished", "plan_complete"):
        x, y = a.get(f"{name}_s"), b.get(f"{name}_s")
        out[name] = x["median"] / y["median"] if x and y and y["median"] > 0 else None
    return out


def run_scripted(args: argparse.Namespace) -> dict[str, Any]:
    """The scripted model at a fixed token rate, the 10-step plan, lookups of `--tool-ms`."""
    registry = build_registry(lambda key: args.tool_ms / 1000)
    steps = scripted_steps()
    text, ends = scripted_text(steps)
    tokens = count_tokens(text)

    def make_planner() -> Planner:
        model = TimedModel(ScriptedModel([text], name="test:scripted", delay=args.call_delay, token_delay=args.token_delay))
        return Planner(model, registry, max_steps=10, max_repairs=0)

    measure_once("streamed", make_planner, registry, "warm-up")  # imports, first validation; kept out of the figures
    r: dict[str, Any] = {"non_streamed": [], "streamed": []}
    for _ in range(args.repeats):
        for mode in ("non_streamed", "streamed"):
            r[mode].append(measure_once(mode, make_planner, registry, "join eight looked-up values"))
    nominal = {sid: args.call_delay + n * args.token_delay for sid, n in ends.items()}
    # when the token that completes each step reached PlanStream, and how long after that the step was handed out
    arrived = {sid: median([t.lags[sid][0] for t in r["streamed"]]) for sid in ends}
    lags = {sid: median([t.lags[sid][1] for t in r["streamed"]]) * 1e3 for sid in ends}
    out = {
        "model": f"ScriptedModel(delay={args.call_delay}, token_delay={args.token_delay})",
        "tokens_per_second": 1 / args.token_delay if args.token_delay else None,
        "plan_tokens": tokens,
        "nominal_model_time_s": args.call_delay + tokens * args.token_delay,
        "tool_ms": args.tool_ms,
        "step_text_complete_nominal_s": nominal,
        "step_text_complete_arrived_s": arrived,
        "last_token_arrived_s": median([t.arrivals[-1] for t in r["streamed"]]),
        "handout_lag_ms": lags,
        "non_streamed": _summary(r["non_streamed"]),
        "streamed": _summary(r["streamed"]),
    }
    out["ratios"] = _ratios(out)
    return out


def local_goal(args: argparse.Namespace, model: Any, registry: Registry, goal: str, shapes: list[str]) -> dict[str, Any]:
    """One goal planned by the local model in each of `shapes` (a shape already measured is skipped)."""
    out: dict[str, Any] = {}
    measured: set[bool] = set()
    for shape in shapes:
        setting = {"default": None, "true": True, "false": False}[shape]
        if Planner(model, registry, max_steps=args.local_max_steps, positional=setting).positional in measured:
            continue  # the planner's default is a shape already measured

        def make_planner(setting: bool | None = setting) -> Planner:
            return Planner(
                TimedModel(model),
                registry,
                max_steps=args.local_max_steps,
                max_repairs=0,
                max_tokens=args.local_max_tokens,
                positional=setting,
            )

        r: dict[str, Any] = {"non_streamed": [], "streamed": []}
        for _ in range(args.local_repeats):
            for mode in ("non_streamed", "streamed"):
                r[mode].append(measure_once(mode, make_planner, registry, goal))
        resolved = make_planner().positional
        measured.add(resolved)
        label = f"positional={resolved}" + (" (the planner's default)" if setting is None else "")
        one: dict[str, Any] = {"positional": resolved, "non_streamed": _summary(r["non_streamed"]), "streamed": _summary(r["streamed"])}
        one["ratios"] = _ratios(one)
        # streamed: the model's first token (its prompt read) and its writing rate after that
        timed = [t for t in r["streamed"] if t.arrivals]
        if timed:
            one["first_token_s"] = median([t.arrivals[0] for t in timed])
            rates = [
                t.output_tokens / (t.arrivals[-1] - t.arrivals[0]) for t in timed if t.output_tokens and t.arrivals[-1] > t.arrivals[0]
            ]
            one["output_tokens_per_s_after_first"] = median(rates) if rates else None
        timed_lags = [t.lags for t in r["streamed"] if t.lags]
        if timed_lags:
            one["handout_lag_s"] = {sid: median([x[sid][1] for x in timed_lags if sid in x]) for sid in timed_lags[0]}
        out[label] = one
    return out


def run_local(args: argparse.Namespace) -> dict[str, Any]:
    """The embedded SmolLM2-135M plans `--local-goal` for real, in each `--positional` shape; whatever it writes is measured."""
    from planexec.models import LocalModel, ModelRequest
    from planexec.models.base import Message

    registry = build_registry(lambda key: lookup_ms(key) / 1000)
    model = LocalModel()
    t0 = time.perf_counter()
    try:  # load the weights, kept out of the figures
        asyncio.run(model.complete(ModelRequest(messages=[Message(role="user", content="Hi")], max_tokens=1)))
    except ModelError as exc:
        return {"error": f"the local model is not available: {exc}"}
    out: dict[str, Any] = {
        "model": model.name,
        "goals": {},
        "max_steps": args.local_max_steps,
        "max_tokens": args.local_max_tokens,
        "load_s": time.perf_counter() - t0,
        "lookup_ms": "50-300, deterministic per key",
    }
    cases = [(args.local_goal, args.positional)]
    if args.local_spelled:
        cases.append((LOCAL_GOAL_SPELLED, ["default"]))
    for goal, shapes in cases:
        out["goals"][goal] = local_goal(args, model, registry, goal, shapes)
    return out


# --- the command line and the report --------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated subset of {','.join(SETUPS)} (default both)")
    p.add_argument("--repeats", type=int, default=5, help="repeats of the scripted set-up; the median is reported (default 5)")
    p.add_argument("--token-delay", type=float, default=0.02, help="scripted: seconds per output token (default 0.02 = 50 tokens/s)")
    p.add_argument("--call-delay", type=float, default=0.5, help="scripted: seconds before the first token (default 0.5)")
    p.add_argument("--tool-ms", type=float, default=100, help="scripted: latency of each lookup in ms (default 100)")
    p.add_argument("--local-repeats", type=int, default=3, help="repeats of the local set-up (default 3; each is two model calls)")
    p.add_argument("--local-goal", default=LOCAL_GOAL, help="the goal the local model plans (in every --positional shape)")
    p.add_argument(
        "--no-spelled",
        dest="local_spelled",
        action="store_false",
        help="local: skip the second goal, the same plan spelled out step by step",
    )
    p.add_argument("--local-max-steps", type=int, default=10, help="local: the planner's max_steps (default 10)")
    p.add_argument("--local-max-tokens", type=int, default=1024, help="local: the planner's max_tokens (default 1024)")
    p.add_argument(
        "--positional",
        default="default,true,false",
        help="local: comma-separated draft shapes to measure: default (the planner's own choice), true, false; "
        "a shape already measured is skipped (default: default,true,false)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = set(args.setups) - set(SETUPS)
    if unknown:
        p.error(f"unknown set-up(s): {', '.join(sorted(unknown))}; choose from {', '.join(SETUPS)}")
    args.positional = [s.strip().lower() for s in args.positional.split(",") if s.strip()]
    if not args.positional or set(args.positional) - {"default", "true", "false"}:
        p.error("--positional takes default, true and/or false")
    if args.repeats < 1 or args.local_repeats < 1:
        p.error("repeats must be at least 1")
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, as the JSON object `--json` prints."""
    r: dict[str, Any] = {
        "benchmark": "plan_streaming",
        "machine": machine(),
        "config": {
            k: getattr(args, k)
            for k in (
                "setups",
                "repeats",
                "token_delay",
                "call_delay",
                "tool_ms",
                "local_repeats",
                "local_max_steps",
                "local_max_tokens",
                "positional",
            )
        },
    }
    if "scripted" in args.setups:
        r["scripted"] = run_scripted(args)
    if "local" in args.setups:
        r["local"] = run_local(args)
    return r


def _fmt(x: dict[str, Any] | None) -> str:
    return f"{x['median']:9.3f}" if x else f"{'-':>9}"


def _ratio(x: float | None) -> str:
    return f"{x:8.2f}x" if x is not None else f"{'-':>9}"


def _table(s: dict[str, Any]) -> list[str]:
    a, b, q = s["non_streamed"], s["streamed"], s["ratios"]
    lines = [
        f"  {'seconds from the start of planning (median)':<46}{'non-str.':>9}{'streamed':>9}{'non/str':>9}",
        f"  {'plan complete':<46}{_fmt(a['plan_complete_s'])}{_fmt(b['plan_complete_s'])}{_ratio(q['plan_complete'])}",
        f"  {'first step parsed (PlanStream.parsed_at)':<46}{'':>9}{_fmt(b['first_parsed_s'])}",
        f"  {'first StepStarted':<46}{_fmt(a['first_started_s'])}{_fmt(b['first_started_s'])}{_ratio(q['first_started'])}",
        f"  {'RunFinished':<46}{_fmt(a['finished_s'])}{_fmt(b['finished_s'])}{_ratio(q['finished'])}",
    ]
    for label, x in (("non-streamed", a), ("streamed", b)):
        spans = ", ".join(f"{k[:-2]} {v['min']:.3f}-{v['max']:.3f}" for k, v in x.items() if k.endswith("_s") and v)
        lines.append(f"  {label} runs: {', '.join(x['statuses'])}; min-max: {spans}")
    return lines


def report(r: dict[str, Any]) -> str:
    """The human-readable table."""
    m = r["machine"]
    lines = [f"plan streaming: Python {m['python']}, {m['cpus']} CPUs, {m['date']}"]
    if "scripted" in r:
        s = r["scripted"]
        c = r["config"]
        lines += [
            "",
            f"(a) scripted model: {s['model']}: {s['tokens_per_second']:.0f} tokens/s after {c['call_delay']} s; "
            f"a 10-step plan of {s['plan_tokens']} tokens (nominal model time {s['nominal_model_time_s']:.2f} s); "
            f"lookups {s['tool_ms']:.0f} ms; median of {c['repeats']}",
            *_table(s),
        ]
        lags = s["handout_lag_ms"]
        arrived = s["step_text_complete_arrived_s"]
        lines += [
            f"  streamed, the model's last token arrived at {s['last_token_arrived_s']:.3f} s (nominal {s['nominal_model_time_s']:.3f} s: "
            f"asyncio.sleep lateness over {s['plan_tokens']} token sleeps)",
            "  each step: its last token arrived (s) -> handed out by PlanStream (+ms later):",
            "    " + ", ".join(f"{sid} {arrived[sid]:.2f} +{lag:.0f}" for sid, lag in lags.items()),
        ]
    if "local" in r:
        s = r["local"]
        lines.append("")
        if "error" in s:
            lines.append(f"(b) local model: skipped: {s['error']}")
            return "\n".join(lines)
        lines.append(
            f"(b) local model {s['model']} (loaded in {s['load_s']:.1f} s) plans for real, no repair, max_steps {s['max_steps']}, "
            f"max_tokens {s['max_tokens']}; lookups 50-300 ms; median of {r['config']['local_repeats']}"
        )
        for goal, shapes in s["goals"].items():
            lines += ["", f"  goal: {goal}"]
            for label, one in shapes.items():
                a = one["non_streamed"]
                valid = "plan invalid" not in a["statuses"]
                lines += [
                    f"  {label}: its plan: {'valid' if valid else 'INVALID'}, {a['steps']} step(s) {a['actions']}"
                    + (" (fewer than 10 steps)" if a["steps"] < 10 else "")
                    + f"; {a['input_tokens']} prompt + {a['output_tokens']} output tokens",
                ]
                if one.get("first_token_s") is not None:
                    rate = one.get("output_tokens_per_s_after_first")
                    lines.append(
                        f"  streamed: first token after {one['first_token_s']:.1f} s (reading the prompt), then {rate or 0:.1f} output tokens/s"
                    )
                lines += _table(one)
                if one.get("handout_lag_s"):
                    lines.append(
                        "  each step handed out by PlanStream this long after the delta completing its text arrived (s): "
                        + ", ".join(f"{sid} +{lag:.2f}" for sid, lag in one["handout_lag_s"].items())
                    )
                for side, x in (("non-streamed", a), ("streamed", one["streamed"])):
                    if x["reason"]:
                        lines.append(f"  {side}: {x['reason'].splitlines()[0][:200]}")
                lines.append(f"  plan text: {a['plan_text'][:400]}" + (" ..." if len(a["plan_text"]) > 400 else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table, or JSON with `--json`."""
    args = parse_args(argv)
    print_result(measure(args), report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
