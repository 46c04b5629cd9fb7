"""The goal path as one library call: `Team`.

Owns the main job, goal → route → plan → review → run → replan/join →
result, and its one set of defaults. The path is one async iterator of
typed stages (`Team.iter`, records in `team.stages`); `run`, `run_sync`,
`events` and `start_goal` are uses of it. The CLI's goal commands still
drive the stage methods (`route_goal`, `plan`, `review`, `start`,
`start_single`, `start_streaming`) one by one, to show each to a person.
A plan not planned here runs through `fleet.saved`. Imports every layer
below it (`library`, `planning`, `governance`, `engine`, `workers`,
`models`, `store`); never a face.

With telemetry on (`planexec.telemetry`), a goal's run is one trace: the
run's span opens before routing and planning and the run takes it, and the
models given as objects report their calls as named ones do.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from planexec.config import Config, RunnerConfig, load_config
from planexec.engine.approval import Approver, StoreApprover
from planexec.engine.calls import approve_calls
from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine, Run, run_id_for
from planexec.engine.join import Joiner
from planexec.engine.loop import run_to_end
from planexec.engine.recording import RunLog
from planexec.engine.results import RunResult
from planexec.engine.runner import Runner
from planexec.errors import PlanRejectedError
from planexec.fleet.local import LocalWorker
from planexec.fleet.saved import run_setup
from planexec.fleet.worker import QueueWorker, queue_store
from planexec.governance.policies import Policy, PolicyContext, narrow_plan, review_plan
from planexec.governance.review import ReviewOutcome, decide_review
from planexec.library.reuse import ReusePlanning, latest_templates, match_rules, matchers_of, plan_with_reuse, reuse_overhead
from planexec.mcp.tools import hold_servers
from planexec.models.base import Model
from planexec.models.profile import profile_of
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan, Step
from planexec.plan.validation import check_plan
from planexec.planning.joiner import ModelJoiner, joiner_note
from planexec.planning.planner import Planner
from planexec.planning.replanner import PlannerReplanner
from planexec.planning.router import Route, Routing, route
from planexec.planning.stream import PlanStream
from planexec.scale import runner_for
from planexec.store.location import open_store
from planexec.team import queueing
from planexec.team.agent import handoff_note, role_tools, single_plan, single_registry, start_single
from planexec.team.assembly import ModelRef, PlannerBounds, TeamModels, bounds_for, build_registry, with_cascades
from planexec.team.settings import ModelOptions, PlanningOptions, Reviewer, ReviewOptions, Submission, Toolbox
from planexec.team.stages import EventSeen, Finished, HandedOff, Planned, Queued, Reviewed, Routed, Stage, Started, WaitingForPerson
from planexec.telemetry.scopes import goal_scope, run_scope, start_run
from planexec.telemetry.setup import active, configure, traced
from planexec.usage import Usage
from planexec.workers.context import run_dependencies
from planexec.workers.gate import CallApprover
from planexec.workers.registry import Registry
from planexec.workers.tools import Tool
from planexec.workers.worker import RoleWorker

__all__ = ["MODES", "Mode", "Reviewer", "RunOptions", "Team"]

Mode = Literal["auto", "single", "plan", "stream"]
# a face's engine settings for the run it starts, given the plan it runs and the review's outcome (see `Team.iter`)
RunOptions = Callable[[Plan | None, ReviewOutcome | None], Mapping[str, Any]]
MODES: tuple[str, ...] = get_args(Mode)


class Team:
    """A planner, role workers and tools that work goals: route, plan, review, run, replan, join.

    `model` is the planner's (a ``"provider:model"`` name or a `Model`;
    default: the environment, then `config`, then ``local:smollm2``), and the
    workers' unless `models` says otherwise. `tools` are plain functions or
    `Tool`s; `toolbox` adds tools modules, a registry of one's own, the
    built-in roles and the workspace toolkit. The tools of the MCP servers
    in `config` (``[planexec.mcp.servers.NAME]``, see `planexec.mcp`) join
    too; a server stays open while a run uses it; the remote A2A agents
    (``[planexec.a2a.agents.NAME]``, see `planexec.a2a`) join as roles. `mode` is how goals are
    worked: ``auto`` (`planning.routing` decides: by default the planner
    plans every goal, with no router call, and a plan of one step is worked
    by one agent), ``single`` (one agent with every tool), ``plan`` (a team
    following a reviewed plan) or ``stream`` (steps start while the plan is
    written; nothing can be reviewed first). `planning` bounds and shapes
    the plans (`PlanningOptions`: the defaults follow the planner model's
    profile), `review` says who decides (`ReviewOptions`), `engine` is the
    engine's own settings (`EngineConfig`: concurrency, timeouts, plan
    revisions, budget, output size; default: planexec.toml's, then the
    engine's), `runner` where a plan's steps run (default: `config`'s
    ``[planexec.runner]``: here, or the function-tool steps on a Ray
    cluster, `planexec.scale`). `store` (a run store, or a path or URL to
    open one) records every run; `seed` makes the planner, the joiner and
    the engine repeatable. Everything left None is `config`'s
    (``planexec.toml``), then the default: `Team.from_config` reads it.

    Review: every plan goes through the policies; then the reviewer, if
    given, decides. Without one, a plan runs when no policy rejects or
    escalates it (`auto_approve` approves escalations too, and steps that
    require approval). A plan that is not approved raises
    `PlanRejectedError` and nothing runs. The `approver` decides steps
    marked `requires_approval`; the `call_approver` each tool call a role
    worker makes that changes things and that the plan did not pre-approve
    (`auto_approve` approves such plain calls, never an escalation: a call
    untrusted data steered goes to a person or is refused, see
    `planexec.workers.gate`). Approvals that outlive the process are kept
    in the store: ``approver=StoreApprover(store)`` for steps and
    ``plan_approver=PlanApprover(store)`` for plan versions.

    Monitoring: a failed step asks the planner for a new version up to
    ``engine.max_replans`` times; `planning.joiner` decides after the steps
    whether to finish or replan. Reuse: a goal that fits a template of the
    store's plan library gets the template's plan filled in instead of a
    new one (`planexec.library.reuse`), reviewed like any other.
    """

    def __init__(
        self,
        model: ModelRef | None = None,
        *,
        tools: Iterable[Callable[..., Any] | Tool] = (),
        mode: Mode = "auto",
        config: Config | None = None,
        store: RunLog | str | None = None,
        seed: int | None = 0,
        models: ModelOptions | None = None,
        toolbox: Toolbox | None = None,
        planning: PlanningOptions | None = None,
        review: ReviewOptions | None = None,
        engine: EngineConfig | None = None,
        runner: RunnerConfig | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        tools = tuple(tools)
        given = {"model": model, "tools": tools, "mode": mode, "config": config, "seed": seed, "models": models, "toolbox": toolbox}
        self._given: dict[str, Any] = {**given, "planning": planning, "review": review, "engine": engine, "runner": runner}
        self._recorded: dict[str, str] = {}  # the model names a variant's runs record (see `variant`)
        self._variants: dict[tuple[Any, ...], Team] = {}  # see `variant`
        self.config = config if config is not None else Config()
        self.seed = seed
        chosen = models or ModelOptions()
        box = toolbox or Toolbox()
        self.planning_options = planning = planning or PlanningOptions()
        self.review_options = review = review or ReviewOptions()
        model, worker_model, role_models = model, chosen.worker, dict(chosen.roles)
        if configure(self.config.telemetry, chosen.env) is not None:  # traces on: a model given as an object reports its calls too
            model, worker_model = _traced(model), _traced(worker_model)
            role_models = {role: _traced(ref) for role, ref in role_models.items()}
        self.models = TeamModels.resolve(
            self.config,
            model=model,
            worker_model=worker_model,
            role_models=role_models,
            base_url=chosen.base_url,
            seed=seed,
            env=chosen.env,
        )
        self.tools_modules = [*self.config.tools, *box.modules]
        self.registry = build_registry(
            self.models,
            tools=tools,
            tools_modules=self.tools_modules,
            registry=box.registry,
            roles=box.roles,
            workspace=box.workspace if box.workspace is not None else self.config.workspace,
            mcp_servers=self.config.mcp.servers,
            a2a_agents=self.config.a2a.agents,
        )
        self.mode: Mode = mode
        profile = profile_of(self.models.planner)
        shortest = bounds_for(self.models.planner)
        self.bounds = PlannerBounds(
            max_steps=planning.max_steps or shortest.max_steps,
            max_tokens=planning.max_tokens or shortest.max_tokens,
            agent_turns=planning.agent_turns or shortest.agent_turns,
        )
        # the planner's model writes its profile's form unless told: compact for a hosted model, JSON for the embedded one
        self.plan_format: Literal["json", "compact"] = planning.plan_format or self.config.plan_format or profile.plan_format
        self.routing: Routing = planning.routing or self.config.routing or "planner"
        # the engine's own settings: as given, else planexec.toml's over the engine's defaults; the team's seed
        self.engine_config: EngineConfig = EngineConfig.from_config(self.config, engine, seed=seed)
        self.joiner = self._joiner(planning.joiner if planning.joiner is not None else bool(self.config.joiner))
        self.handoff = planning.handoff
        self.reuse = matchers_of(planning.reuse if planning.reuse is not None else self.config.reuse)  # () is off
        self.store: RunLog | None = open_store(store) if isinstance(store, str) else store
        # the roles' cascades of models, and the router that picks the model a step with one starts on (`engine.cascade`)
        router = chosen.router or self.config.model_router
        self.engine_config = with_cascades(self.engine_config, self.models, router, self.store, given=engine is not None)
        self.runner: RunnerConfig = runner if runner is not None else self.config.runner
        self._runners: dict[Registry, Runner | None] = {}  # one per registry: a Ray runner's actors serve every run

    @property
    def policies(self) -> Sequence[Policy]:
        """The policies every plan goes through."""
        return self.review_options.policies

    @property
    def auto_approve(self) -> bool:
        """True when the team approves what a person would otherwise be asked (``--yes``)."""
        return self.review_options.auto_approve

    @property
    def approver(self) -> Approver | StoreApprover | None:
        """Who decides steps that require approval (with `auto_approve` and none given: approved)."""
        given = self.review_options.approver
        return given if given is not None else ((lambda step: True) if self.auto_approve else None)

    @property
    def call_approver(self) -> CallApprover | StoreApprover | None:
        """Who decides a role's side-effecting calls the plan did not pre-approve; `auto_approve` approves plain ones, never an
        escalation (untrusted data steering a call)."""
        given = self.review_options.call_approver
        return given if given is not None else (approve_calls if self.auto_approve else None)

    @property
    def max_replans(self) -> int:
        """New versions of a plan a run may ask for."""
        return self.engine_config.max_replans

    @classmethod
    def from_config(cls, folder: str | Path = ".", **overrides: Any) -> Team:
        """A team set up by the ``planexec.toml`` in `folder` (if any), with `overrides` winning (the CLI's way)."""
        config = load_config(Path(folder))
        overrides.setdefault("store", config.store)
        return cls(config=config, **overrides)

    # --- what the team is made of --------------------------------------------------------------

    @property
    def planner_model(self) -> Model:
        """The model that routes, plans, replans and joins."""
        return self.models.planner

    @property
    def planner(self) -> Planner:
        """A planner over the team's registry, with the shared bounds (shorter plans on a local model)."""
        return self._planner_over(self.registry)

    def _planner_over(self, registry: Registry) -> Planner:
        return Planner(
            self.models.planner,
            registry,
            max_steps=self.bounds.max_steps,
            max_repairs=self.planning_options.max_repairs,
            seed=self.seed,
            max_tokens=self.bounds.max_tokens,
            positional=self.planning_options.positional,
            plan_format=self.plan_format,
        )

    def replanner_for(self, registry: Registry) -> PlannerReplanner:
        """A replanner on the team's planner model and bounds over `registry` (a plan file's own: its revisions name
        the tools that plan runs on), for a plan this team did not write (``planexec run --plan``)."""
        return PlannerReplanner(self._planner_over(registry))

    def _joiner(self, joiner: bool | Joiner) -> Joiner | None:
        if joiner is True:
            note = joiner_note(self.models.planner)
            if note is not None:
                raise ValueError(note)
            return ModelJoiner(self.models.planner, seed=self.seed)
        return joiner or None

    def engine(self, *, monitored: bool = True, **overrides: Any) -> Engine:
        """An engine over the team's registry with its settings; `overrides` (`EngineConfig` fields) win (a face's approvers, a display)."""
        return Engine(config=self.engine_settings(monitored=monitored, **overrides))

    def runner_for(self, registry: Registry) -> Runner | None:
        """The runner `runner` asks for on `registry` (None: the local one), one per registry; `ConfigError` when Ray is missing."""
        if registry not in self._runners:
            self._runners[registry] = runner_for(self.runner, registry)
        return self._runners[registry]

    def engine_settings(self, *, monitored: bool = True, **overrides: Any) -> EngineConfig:
        """The `EngineConfig` of the team's runs: its own settings, the team's registry, store and approvers, and for a plan
        (`monitored`) its replanner and joiner; `overrides` win. A single agent's has no replanner or joiner."""
        team: dict[str, Any] = {
            "registry": self.registry,
            "store": self.store,
            "approver": self.approver,
            "call_approver": self.call_approver,
        }
        if self.review_options.plan_approver is not None:
            team["plan_approver"] = self.review_options.plan_approver
        if monitored:  # a single agent has no plan to revise
            if self.max_replans:
                team["replanner"] = PlannerReplanner(self.planner)
            if self.joiner is not None:
                team["joiner"] = self.joiner
        team.update(overrides)
        if monitored and "runner" not in team:  # a single agent's run stays here
            runner = self.runner_for(team["registry"])
            if runner is not None:  # None: the engine's local runner
                team["runner"] = runner
        return self.engine_config.replace(**team)

    # --- the stages ------------------------------------------------------------------------------

    async def route(self, goal: str) -> Route:
        """One short call of the planner's model: does `goal` need a team (``plan``) or one agent (``single``)?"""
        with goal_scope(self, goal):  # traced: under the span the goal's run will take
            return await route(goal, self.models.planner)

    async def route_goal(self, goal: str) -> Route:
        """How ``auto`` mode works `goal`, with no model call where none is needed (see `Route.by`).

        A saved plan that the reuse rules fit: ``plan``. With `routing`
        ``"planner"``: ``plan``, and a plan of one step is then worked by one
        agent (`single_agent_tools`); the planner's call does the router's work.
        With ``"router"``: the router's call (`route`).
        """
        if self._fits_a_template(goal):
            return Route(mode="plan", reason="a saved plan fits the goal word for word", by="template")
        if self.routing == "planner":
            return Route(mode="plan", reason="planned first: a plan of one step is worked directly, several by the team", by="planner")
        return await self.route(goal)

    async def plan(self, goal: str, *, note: str | None = None) -> Planning:
        """Plan only: the validated plan, every draft and their usage; `PlanningError` when the planner gives up.

        With reuse on and templates in the store, a `ReusePlanning`: the plan
        of the template that fits (chosen by rules, or by the workers' model),
        or the planner's with the reason none was reused. `note` is trusted
        context the planner reads after the goal (a single agent's handoff).
        """
        with goal_scope(self, goal):  # traced: under the span the goal's run will take
            templates = latest_templates(self.store) if self.reuse and note is None else []
            if not templates:
                return await self.planner.draft(goal, note=note)
            return await plan_with_reuse(goal, self.planner, templates, model=self.models.worker, matchers=self.reuse)

    def plan_sync(self, goal: str) -> Planning:
        """`plan` for code without an event loop."""
        return run_to_end(self.plan(goal))

    def policy_context(self, previous: Plan | None = None) -> PolicyContext:
        """What the policies read: the registry's tool metadata, the prices, the last approved version."""
        return PolicyContext(registry=self.registry, prices=self.models.settings.prices, previous=previous)

    async def review(self, plan: Plan, *, person_required: bool = True) -> ReviewOutcome:
        """The policies' review, then the reviewer's decision (or the team's default); see the class docstring.

        `person_required` False (a hand-written plan) lets a plan every policy
        approves run without asking the reviewer.
        """
        async for stage in self.review_stages(plan, person_required=person_required):
            if isinstance(stage, Reviewed):
                return stage.outcome
        raise AssertionError("a review ends with its outcome")  # pragma: no cover - review_stages always yields one

    async def review_stages(self, plan: Plan, *, person_required: bool = True) -> AsyncIterator[WaitingForPerson | Reviewed]:
        """`review` as stages: `WaitingForPerson` when the reviewer is asked, then `Reviewed` with the outcome."""
        context = self.policy_context()
        plan = narrow_plan(plan, self.policies, context)[0]  # the policies judge, and the engine runs, the narrowed plan
        result = review_plan(plan, self.policies, context)

        reviewer = self.review_options.reviewer
        if result.decision != "reject" and reviewer is not None and (person_required or result.decision == "escalate"):
            yield WaitingForPerson(plan, result)
            answer = reviewer(plan, result)
            answer = await answer if inspect.isawaitable(answer) else answer
            if not isinstance(answer, ReviewOutcome):
                decision: Literal["approve", "reject"] = "approve" if answer is True else "reject"
                reason = "approved by the reviewer" if answer is True else "rejected by the reviewer"
                answer = ReviewOutcome(decision=decision, by="person", reason=reason, plan=plan, verdicts=result.verdicts)
            yield Reviewed(answer)
            return
        # nobody is asked: auto_approve stands in for the person an escalation wants; else the policies decide
        yes = "auto_approve" if self.auto_approve and result.decision == "escalate" else None
        yield Reviewed(decide_review(plan, result, policies_configured=bool(self.policies), yes=yes, person_required=False))

    def start(
        self,
        plan: Plan,
        *,
        planning: Planning | None = None,
        overhead: Mapping[str, Usage] | None = None,
        run_id: str | None = None,
        validate: bool = True,
        setup: Mapping[str, Any] | None = None,
        **engine_overrides: Any,
    ) -> Run:
        """Start a reviewed plan on the team's engine in the current event loop; returns the `Run` handle. `setup` adds to
        what `RunStarted` records (``continues``: the single agent's run this one took over from)."""
        engine = self.engine(**engine_overrides)
        overhead = reuse_overhead(planning, overhead)  # a template chosen by a model: that call counts
        setup = self.setup(planning, **(setup or {}))
        run = start_run(
            lambda: engine.start(plan, run_id=run_id, planning=planning, overhead=overhead, validate=validate, setup=setup),
            owner=self,
            goal=plan.goal,
        )
        return hold_servers(self.registry, run)  # its MCP servers close when the last run using them ends

    def start_single(
        self,
        goal: str,
        *,
        registry: Registry | None = None,
        planning: Planning | None = None,
        overhead: Mapping[str, Usage] | None = None,
        run_id: str | None = None,
        requires_approval: bool | None = None,
        **engine_overrides: Any,
    ) -> Run:
        """Start one agent on `goal` with every tool of `registry` (default: the team's), on the workers' model for ``agent``."""
        settings = self.engine_settings(monitored=False, **engine_overrides)
        gated = self.auto_approve if requires_approval is None else requires_approval
        tools = registry if registry is not None else self.registry  # a name the lambda below sees as set
        setup = self.setup(planning)
        setup.pop("planner", None)  # one agent works the goal: no plan the planner wrote runs (nothing to learn planning from)
        run = start_run(
            lambda: start_single(
                goal,
                model=self.models.for_role("agent"),
                registry=tools,
                max_turns=self.bounds.agent_turns,
                engine=settings,
                overhead=reuse_overhead(planning, overhead),
                run_id=run_id,
                planning=planning,
                requires_approval=gated,
                setup=setup,
            ),
            owner=self,
            goal=goal,
        )
        return hold_servers(tools, run)

    def start_streaming(self, goal: str | PlanStream, *, run_id: str | None = None, **engine_overrides: Any) -> Run:
        """Start a run whose steps begin while the planner writes them (a goal, or a `PlanStream` to keep); no review is possible."""
        if self.policies:
            raise ValueError("a streamed plan starts running before it is complete, so the policies cannot review it: use mode 'plan'")
        engine = self.engine(**engine_overrides)
        stream = goal if isinstance(goal, PlanStream) else PlanStream(self.planner, goal)
        setup = {**self.setup(), "planner": stream.planner.asked_for(stream.goal)}  # recorded for training data, as a plan's
        run = start_run(lambda: engine.start_streaming(stream, run_id=run_id, setup=setup), owner=self, goal=stream.goal)
        return hold_servers(self.registry, run)

    def setup(self, planning: Planning | None = None, **more: Any) -> dict[str, Any]:
        """How the team's runs are set up, recorded in `RunStarted` for whoever resumes one (where the plan came from, the
        models of a `variant`, and `more`: a queued single agent's role)."""
        reused = {"reuse": planning.reuse.to_dict()} if isinstance(planning, ReusePlanning) else {}
        models = {"models": dict(self._recorded)} if self._recorded else {}
        asked = self.planner.asked(planning, reused=isinstance(planning, ReusePlanning) and planning.reuse.reused) if planning else {}
        return run_setup(self.tools_modules, self.runner, **reused, **models, **({"planner": asked} if asked else {}), **more)

    def single_agent_tools(self, step: Step) -> Registry | None:
        """The tools of the role a one-step plan gives the whole goal, for one agent; None when the step calls a tool.

        A step that calls a tool is already direct (no model in the loop), so it
        runs as planned. For a role's task the agent takes that role's tools (the
        planner chose them for the goal): the writer has none, so the agent
        answers in plain text, which a small model writes far better than
        JSON-mode replies.
        """
        worker = self.registry.workers.get(step.worker)
        if not isinstance(worker, RoleWorker) or step.action not in worker.tasks:
            return None
        return role_tools(self.registry, worker.name)

    # --- runs handed to the store's queue ------------------------------------------------------

    def variant(
        self, *, model: ModelRef | None = None, worker_model: ModelRef | None = None, modules: Sequence[str] = (), **changes: Any
    ) -> Team:
        """This team with other models (the planner's, the workers'), more tools modules, or other settings (`changes`:
        any of `Team`'s arguments, such as ``planning``): what a face's form chose for one goal, or what a queued run needs.
        Its runs record the model names, so the worker that takes them (`worker`) works them on the same models. One per
        choice, kept; this team when nothing changes."""
        extra = tuple(m for m in modules if m not in self.tools_modules)
        if model is None and worker_model is None and not extra and not changes:
            return self
        key = (model, worker_model, extra, tuple(sorted((k, repr(v)) for k, v in changes.items())))
        if key not in self._variants:
            given = {**self._given, **changes}
            if model is not None:
                given["model"] = model
            if worker_model is not None:
                given["models"] = dataclasses.replace(given["models"] or ModelOptions(), worker=worker_model)
            if extra:
                box = given["toolbox"] or Toolbox()
                given["toolbox"] = dataclasses.replace(box, modules=(*box.modules, *extra))
            team = Team(store=self.store, **given)
            if model is not None or worker_model is not None:
                team._recorded = {"planner": team.models.planner.name, "worker": team.models.worker.name}
            self._variants[key] = team
        return self._variants[key]

    def run_settings(self, plan: Plan, setup: Mapping[str, Any]) -> EngineConfig:
        """The engine settings a queued run is worked with by this team's `worker`: the models and tools modules its setup
        recorded (a `variant` when they differ from this team's), its registry, replanner and joiner; a single agent's
        registry when it was queued as one (`single`: the role whose tools it has, ``*`` for all)."""
        recorded = setup.get("models")
        models: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
        planner, worker = models.get("planner"), models.get("worker")
        same = planner in (None, self.models.planner.name) and worker in (None, self.models.worker.name)
        team = self.variant(
            model=None if same else planner, worker_model=None if same else worker, modules=[str(t) for t in setup.get("tools", [])]
        )
        single = setup.get("single")
        if isinstance(single, str):
            tools = team.registry if single == "*" else role_tools(team.registry, single)
            agent = single_registry(tools, model=team.models.for_role("agent"), max_turns=team.bounds.agent_turns)
            return team.engine_settings(monitored=False, registry=agent)
        return team.engine_settings()

    def worker(self, **options: Any) -> QueueWorker:
        """A worker that takes the store's queued runs and works each on this team (`run_settings`); `options` are
        `QueueWorker`'s (concurrency, poll, idle_exit, once, grace, on_note). ``await team.worker(once=True).serve()``."""
        return QueueWorker(queue_store(self.store), engine_for=self.run_settings, runner=self.runner, **options)

    def local_worker(self, *, on_note: Callable[[str], None] | None = None, **options: Any) -> LocalWorker:
        """`worker` in a thread of its own, for a face on one machine (`fleet.local`): ``start()``, ``wake()``, ``stop()``;
        `on_note` hears each line the worker says (they are kept in its `notes` too)."""
        return LocalWorker(lambda note: self.worker(on_note=note, **options), on_note=on_note)

    async def submit(
        self, goal: str, *, mode: Mode | None = None, run_id: str | None = None, submission: Submission | None = None
    ) -> Queued:
        """Route, plan and have the policies review `goal`, then store it as a run for a worker; nothing runs here.

        The stages of `iter` with `submit`, to the `Queued` one: ``waiting``
        for a person's approval in the store (``planexec approve``, the
        console, an MCP client's user), ``queued`` (approved: a worker takes
        it) or ``refused`` (a policy rejected it). `PlanningError` when no
        valid plan could be written; `StoreError` when the team's store keeps
        no queue.
        """
        async for stage in self.iter(goal, mode=mode, run_id=run_id, events=False, submit=submission or Submission()):
            if isinstance(stage, Queued):
                return stage
        raise AssertionError("a submitted goal ends queued or raises")  # pragma: no cover

    async def submit_plan(self, plan: Plan, *, run_id: str | None = None, submission: Submission | None = None) -> Queued:
        """A plan not planned here (a template filled in), checked against the team's registry, reviewed by the policies
        and stored as a run for a worker, as `submit` does with a goal's; `PlanValidationError` when it cannot run here."""
        async for stage in self.iter_plan(plan, run_id=run_id, submit=submission or Submission()):
            if isinstance(stage, Queued):
                return stage
        raise AssertionError("a submitted plan ends queued or raises")  # pragma: no cover

    async def iter_plan(self, plan: Plan, *, run_id: str | None = None, submit: Submission) -> AsyncGenerator[Stage, None]:
        """`submit_plan` as stages: `Planned` (the plan as given: no drafts), the review, `Queued`."""
        check_plan(plan, self.registry)
        planning = Planning(plan=plan, drafts=[], usage=Usage())
        yield Planned(planning)
        async for stage in self._queued(planning, run_id=run_id_for(run_id), submission=submit):
            yield stage

    def _queued(self, planning: Planning, *, run_id: str, submission: Submission) -> AsyncIterator[Stage]:
        """A submitted plan's review and its run stored (`team.queueing`)."""
        return queueing.reviewed(
            planning, run_id=run_id, submission=submission, store=self.store, policies=self.policies,
            context=self.policy_context(), auto_approve=self.auto_approve, setup=self.setup,
        )  # fmt: skip

    async def _queue_single(self, goal: str, planning: Planning | None, run_id: str, submission: Submission, role: str) -> Queued:
        """A single agent's run stored approved by its submitter (no plan to review, as here); `role` whose tools it has."""
        plan = single_plan(goal, requires_approval=self.auto_approve)
        by = submission.by or "the submitter"
        return await queueing.enqueue(
            plan, planning, store=self.store, run_id=run_id, setup=self.setup(planning, single=role), submission=submission,
            auto_approve=self.auto_approve, approved_by=by,
        )  # fmt: skip

    # --- the whole job ---------------------------------------------------------------------------

    async def iter(
        self,
        goal: str,
        *,
        mode: Mode | None = None,
        run_id: str | None = None,
        events: bool = True,
        deps: Any = None,
        submit: Submission | None = None,
        run_options: RunOptions | None = None,
    ) -> AsyncGenerator[Stage, None]:
        """Work `goal` and yield each stage as it happens (`team.stages`): routed (``auto`` mode), planned, waiting for a
        person (when the reviewer is asked), reviewed, started, each event of the run (unless `events` is False), finished.

        Every way of working a goal is a use of this: `run` (to `Finished`),
        `events` (the `EventSeen` stages), `start_goal` (to `Started`). A plan
        the review does not approve yields `Reviewed`, then raises
        `PlanRejectedError`; no valid plan raises `PlanningError`. `deps`
        reaches every tool that takes a `ToolContext`.

        `run_options` is a face's say in the run it starts: given the plan
        it runs (None for a streamed one) and the review's outcome (None for a
        single agent or a streamed plan), the engine settings it adds (its
        step, call and plan approvers; its own display follows the `Started`
        run). A reviewer that answers ``wait`` (nobody to ask here) starts the
        run under the plan approver those options or `ReviewOptions` give,
        which waits for a person's decision in the store.

        With `submit` the goal is handed to the store's queue instead: the
        policies review the plan, the stages end with `Queued` (see
        `submit`), and a worker runs it (`worker`; ``planexec worker``).
        """
        if submit is not None:
            if (mode or self.mode) == "stream":
                raise ValueError("a streamed run starts while its plan is written, so it cannot wait in the queue: use mode 'plan'")
            async for stage in self._until_started(goal, mode=mode, run_id=run_id_for(run_id), submit=submit):
                yield stage
            return
        started: Started | None = None
        with run_dependencies(deps):  # the run's tasks, and the tool threads they start, inherit it
            if active() is None:
                async for stage in self._until_started(goal, mode=mode, run_id=run_id, run_options=run_options):
                    yield stage
                    if isinstance(stage, Started):
                        started = stage
            else:
                run_id = run_id_for(run_id)  # known before planning: the planner's calls carry it
                with run_scope(run_id):  # the run's span opens now: routing and planning are part of its trace
                    async for stage in self._until_started(goal, mode=mode, run_id=run_id, run_options=run_options):
                        yield stage
                        if isinstance(stage, Started):
                            started = stage
        assert started is not None  # _until_started ends with Started or raises
        if events:
            async for event in started.run.events():
                yield EventSeen(event)
        result = await started.run.result()
        note = handoff_note(result, self.registry) if started.mode == "single" and self.handoff else None
        if note is not None:  # the agent read untrusted text, then needed a side effect: a plan does the rest
            yield HandedOff(result, note)
            again: Started | None = None
            with run_dependencies(deps):
                spent = {"agent": result.usage}  # what the agent used counts in the run that finishes the goal
                async for stage in self._until_started(
                    goal, mode="plan", run_id=None, run_options=run_options, note=note, spent=spent, continues=result.run_id
                ):
                    yield stage
                    if isinstance(stage, Started):
                        again = stage
            assert again is not None
            if events:
                async for event in again.run.events():
                    yield EventSeen(event)
            result = await again.run.result()
        yield Finished(result)

    async def start_goal(self, goal: str, *, mode: Mode | None = None, run_id: str | None = None) -> Run:
        """Route, plan and review `goal`, then start the run; returns its handle (see `run`)."""
        stages = self.iter(goal, mode=mode, run_id=run_id, events=False)
        try:
            async for stage in stages:
                if isinstance(stage, Started):
                    return stage.run
        finally:
            await stages.aclose()  # the run goes on; only its stages stop being read
        raise AssertionError("a goal's path starts a run or raises")  # pragma: no cover

    async def _until_started(
        self,
        goal: str,
        *,
        mode: Mode | None,
        run_id: str | None,
        submit: Submission | None = None,
        run_options: RunOptions | None = None,
        note: str | None = None,
        spent: Mapping[str, Usage] | None = None,
        continues: str | None = None,
    ) -> AsyncIterator[Stage]:
        options = run_options or (lambda plan, outcome: {})
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        overhead: dict[str, Usage] = dict(spent or {})
        routed: Route | None = None
        if mode == "auto":
            routed = await self.route_goal(goal)
            if routed.by == "router":
                overhead["router"] = routed.usage
            yield Routed(routed)
            mode = routed.mode
        if mode == "single":
            if submit is not None:  # no plan to review, as here: the submitter's goal is the agent's
                yield await self._queue_single(goal, None, str(run_id), submit, "*")
                return
            run = self.start_single(goal, overhead=overhead, run_id=run_id, **options(single_plan(goal), None))
            yield Started(run, "single", "one agent works the goal")
            return
        if mode == "stream":
            yield Started(
                self.start_streaming(goal, run_id=run_id, **options(None, None)), "stream", "steps start while the plan is written"
            )
            return
        planning = await self.plan(goal, note=note)
        yield Planned(planning)
        if routed is not None and routed.by != "template" and len(planning.plan.steps) == 1:  # nothing to coordinate
            step = planning.plan.steps[0]
            own = self.single_agent_tools(step)
            if own is not None and submit is not None:
                yield await self._queue_single(goal, planning, str(run_id), submit, step.worker)
                return
            if own is not None:
                extra = options(single_plan(goal), None)
                run = self.start_single(goal, registry=own, planning=planning, overhead=overhead, run_id=run_id, **extra)
                yield Started(run, "single", f"the plan has one step: one agent works the goal with the tools of {step.worker}")
                return
        if submit is not None:
            async for stage in self._queued(planning, run_id=str(run_id), submission=submit):
                yield stage
            return
        outcome: ReviewOutcome | None = None
        async for stage in self.review_stages(planning.plan):
            yield stage
            if isinstance(stage, Reviewed):
                outcome = stage.outcome
        assert outcome is not None
        extra = dict(options(outcome.plan, outcome))
        waits = outcome.decision == "wait" and (extra.get("plan_approver") or self.review_options.plan_approver) is not None
        if not outcome.approved and not waits:
            used = sum(overhead.values(), planning.usage)
            raise PlanRejectedError(outcome.reason, by=outcome.by, plan_id=planning.plan.plan_id, usage=used)
        if outcome.edited:  # the reviewer's edit runs, not the planner's draft
            check_plan(outcome.plan, self.registry)
            planning = dataclasses.replace(planning, plan=outcome.plan)
        more: dict[str, Any] = {"continues": continues} if continues else {}
        more["review"] = {"by": outcome.by, "edited": outcome.edited}  # who let the plan run, and whether they changed it
        run = self.start(planning.plan, planning=planning, overhead=overhead, run_id=run_id, validate=outcome.edited, setup=more, **extra)
        yield Started(run, "plan", "its plan waits for a person in the store" if waits else "a team follows the reviewed plan")

    def _fits_a_template(self, goal: str) -> bool:
        """True when the rules of plan reuse fit `goal` to a template of the store (no model call)."""
        if "rules" not in self.reuse:
            return False
        templates = latest_templates(self.store)
        return bool(templates) and bool(match_rules(goal, templates, self.registry))

    async def run(self, goal: str, *, mode: Mode | None = None, run_id: str | None = None, deps: Any = None) -> RunResult:
        """Work `goal` to the end: its `RunResult` holds the answer, every step, and the usage of every role.

        `deps` reaches every tool that takes a `ToolContext` (a database
        handle, an environment): one team serves many runs. The result's wall
        time counts routing and planning too. Raises `PlanningError` when no
        valid plan could be written and `PlanRejectedError` when the review
        did not approve it (nothing ran). The stages of `iter`, to the end.
        """
        t0 = time.perf_counter()
        async for stage in self.iter(goal, mode=mode, run_id=run_id, events=False, deps=deps):
            if isinstance(stage, Finished):
                return stage.result.model_copy(update={"wall_time": time.perf_counter() - t0})
        raise AssertionError("a goal's path ends with its result or raises")  # pragma: no cover

    def run_sync(self, goal: str, *, mode: Mode | None = None, run_id: str | None = None, deps: Any = None) -> RunResult:
        """`run` for code without an event loop."""
        return run_to_end(self.run(goal, mode=mode, run_id=run_id, deps=deps))

    async def events(self, goal: str, *, mode: Mode | None = None, run_id: str | None = None, deps: Any = None) -> AsyncIterator[Any]:
        """Work `goal` and yield every event of its run as it happens (drafts, steps, revisions, the end): `iter`'s events."""
        async for stage in self.iter(goal, mode=mode, run_id=run_id, deps=deps):
            if isinstance(stage, EventSeen):
                yield stage.event

    async def execute(self, plan: Plan, *, run_id: str | None = None, review: bool = True, deps: Any = None) -> RunResult:
        """Run a hand-written or saved plan: validated, reviewed by the policies (a person only if one escalates), then run."""
        check_plan(plan, self.registry)
        if review:
            outcome = await self.review(plan, person_required=False)
            if not outcome.approved:
                raise PlanRejectedError(outcome.reason, by=outcome.by, plan_id=plan.plan_id)
            plan = outcome.plan
        with run_dependencies(deps):
            run = self.start(plan, run_id=run_id, validate=False)
        return await run.result()

    def execute_sync(self, plan: Plan, *, run_id: str | None = None, review: bool = True, deps: Any = None) -> RunResult:
        """`execute` for code without an event loop."""
        return run_to_end(self.execute(plan, run_id=run_id, review=review, deps=deps))

    def __repr__(self) -> str:
        return f"Team(planner={self.models.planner.name!r}, workers={sorted(self.registry.workers)!r}, mode={self.mode!r})"


def _traced(ref: Any) -> Any:
    """A model given as an object, wrapped so its calls are traced; a name (resolved to a traced model) as it is; each of a
    role's cascade."""
    if isinstance(ref, (list, tuple)):
        return [_traced(one) for one in ref]
    return traced(ref) if ref is not None and not isinstance(ref, str) else ref
