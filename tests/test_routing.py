"""Cascades of models per step and the routers that pick a step's first model (`engine.cascade`, `governance.routing`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planexec import Engine, EngineConfig, ModelOptions, Plan, Registry, RoleWorker, Team, Toolbox, tool
from planexec.config import Config, load_config
from planexec.engine.cascade import MOVES_ON, route_step
from planexec.engine.replay import replay
from planexec.errors import ConfigError, ModelServerError, PlanParseError, PlanValidationError, RegistryError
from planexec.models import ModelSettings
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.plan.compact import parse_compact, print_compact
from planexec.policies import ByDifficulty, ByWorker, FirstModel, FirstOf, LearnedRouter, RouteChoice, load_router
from planexec.store import open_store
from planexec.testing import FunctionModel, ScriptedModel, tool_call
from planexec.workers.worker import CriticWorker

PRICES = PriceTable({"test:small": {"input": 1.0, "output": 2.0}, "test:large": {"input": 10.0, "output": 20.0}})


def sized(name: str, answer: Any) -> ManagedModel:
    """A priced double: `answer(request)` (or a fixed text) played by a `FunctionModel`, priced per million tokens."""
    fn = answer if callable(answer) else (lambda request: answer)
    return ManagedModel(FunctionModel(fn, name=name), retries=0, prices=PRICES)


@tool(read_only=True)
def check() -> str:
    """Check the work (a critic's approval counts only after a tool check)."""
    return "checked"


def calls(model: ManagedModel) -> int:
    return len(model.inner.requests)


def registry(*models: Any, critic: Any = None) -> Registry:
    reg = Registry.default()
    reg.add_worker(
        RoleWorker("writer", model=ScriptedModel([], name="test:own"), description="writes", system_prompt="Write.", tasks=("write",))
    )
    for m in models:
        reg.add_model(m)
    if critic is not None:
        reg.add_worker(critic)
    return reg


def plan(*steps: dict[str, Any]) -> Plan:
    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": list(steps)})


def step(sid: str = "a", **extra: Any) -> dict[str, Any]:
    return {"id": sid, "worker": "writer", "action": "write", "instruction": "write it", **extra}


def run(reg: Registry, p: Plan, **settings: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []

    async def go() -> Any:
        return await Engine(reg, on_event=events.append, **settings).run(p)

    return asyncio.run(go()), events


def kinds(events: list[Any], *types: str) -> list[Any]:
    return [e for e in events if e.type in types]


# --- the cascade moves on, and stops at the first success ------------------------------------------------------


def test_a_failed_criterion_moves_the_step_to_its_next_model_and_the_first_success_ends_it():
    small, large, huge = sized("test:small", ""), sized("test:large", "a poem"), sized("test:huge", "never asked")
    reg = registry(small, large, huge)
    result, events = run(reg, plan(step(models=["test:small", "test:large", "test:huge"], success_criteria=["not_empty"])))
    assert result.ok and result.answer == "a poem"
    assert (calls(small), calls(large), calls(huge)) == (1, 1, 0)  # stopped at the first success
    rec = result.steps["a"]
    assert [(a.attempt, a.model, a.then) for a in rec.model_attempts] == [(1, "test:small", "escalate"), (2, "test:large", None)]
    assert rec.model_attempts[0].error.rule == "check_failed" and rec.model == "test:large" and rec.attempts == 2
    (escalated,) = kinds(events, "step_escalated")
    assert (escalated.from_model, escalated.to_model, escalated.reason, escalated.attempt) == (
        "test:small",
        "test:large",
        "check_failed",
        1,
    )
    started = kinds(events, "step_started")
    assert [(e.attempt, e.model) for e in started] == [(1, "test:small"), (2, "test:large")]
    failed = kinds(events, "step_failed")
    assert [(e.then, e.model) for e in failed] == [("escalate", "test:small")]


def test_a_worker_that_raises_or_gives_no_answer_moves_on():
    broken = sized("test:small", lambda request: (_ for _ in ()).throw(ModelServerError("overloaded", model="test:small")))
    large = sized("test:large", "done")
    result, events = run(registry(broken, large), plan(step(models=["test:small", "test:large"])))
    assert result.ok and result.answer == "done"
    assert [a.error.rule if a.error else None for a in result.steps["a"].model_attempts] == ["worker", None]
    assert "worker" in MOVES_ON and kinds(events, "step_escalated")[0].reason == "worker"


def test_a_critic_that_rejects_moves_the_step_on():
    verdicts = ScriptedModel(
        [tool_call("check"), '{"approved": false, "reasons": ["wrong"]}', tool_call("check"), '{"approved": true, "reasons": ["right"]}'],
        name="test:critic",
    )
    critic = CriticWorker(model=verdicts, description="reviews", system_prompt="Check.", tools=[check])
    small, large = sized("test:small", "a guess"), sized("test:large", "the answer")
    reg = registry(small, large, critic=critic)
    result, events = run(reg, plan(step(models=["test:small", "test:large"], success_criteria=[{"kind": "critic"}])))
    assert result.ok and result.answer == "the answer"
    assert [(v["attempt"], v["approved"]) for v in result.steps["a"].verdicts] == [(1, False), (2, True)]
    assert kinds(events, "step_escalated")[0].reason == "check_failed"


def test_each_attempts_model_and_cost_are_recorded_and_the_step_sums_them():
    small, large = sized("test:small", ""), sized("test:large", "four words of answer")
    result, events = run(registry(small, large), plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"])))
    rec = result.steps["a"]
    first, second = rec.model_attempts
    assert first.usage.cost > 0 and second.usage.cost > first.usage.cost  # priced at each model's own rate
    assert second.usage.cost == pytest.approx(PRICES.lookup("test:large").of_usage(second.usage))
    assert rec.usage == first.usage + second.usage and result.usage.cost == pytest.approx(first.usage.cost + second.usage.cost)
    by_event = {(e.attempt, e.model): e.usage for e in kinds(events, "step_failed", "step_succeeded")}
    assert by_event == {(1, "test:small"): first.usage, (2, "test:large"): second.usage}
    # the stored events tell the same story: the replayed record is the live one's
    assert replay(events, result.plan).steps["a"].model_attempts == rec.model_attempts


# --- when the last model fails, the failure action applies ---------------------------------------------------------


def test_a_cascade_whose_every_model_fails_applies_the_steps_failure_action():
    small, large = sized("test:small", ""), sized("test:large", "")
    result, events = run(
        registry(small, large), plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"], failure_action="skip"))
    )
    rec = result.steps["a"]
    assert rec.state.value == "failed" and rec.reason == "failure action: skip" and result.status.value == "partial"
    assert [e.then for e in kinds(events, "step_failed")] == ["escalate", "skip"]
    assert [a.then for a in rec.model_attempts] == ["escalate", "skip"]


def test_a_retry_after_the_cascade_retries_the_last_model_counting_only_its_attempts():
    small, large = sized("test:small", ""), sized("test:large", "")
    fa = {"kind": "retry", "max_attempts": 2, "backoff": 0}
    result, events = run(
        registry(small, large), plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"], failure_action=fa))
    )
    assert (calls(small), calls(large)) == (1, 2)  # the cascade first, then 2 attempts on the last model
    assert [(e.model, e.then) for e in kinds(events, "step_failed")] == [
        ("test:small", "escalate"),
        ("test:large", "retry"),
        ("test:large", "abort"),
    ]
    assert result.status.value == "aborted"


def test_a_failure_that_is_not_the_models_does_not_move_on():
    small, large = sized("test:small", "x"), sized("test:large", "y")
    bad = step(models=["test:small", "test:large"], parameters={"text": "${b.missing}"})
    result, events = run(registry(small, large), plan({"id": "b", "action": "echo", "parameters": {"value": {}}}, bad))
    assert result.steps["a"].error.rule == "reference" and not kinds(events, "step_escalated")
    assert (calls(small), calls(large)) == (0, 0)


# --- routers ----------------------------------------------------------------------------------------------------


def test_a_hard_step_starts_on_the_strongest_model_and_an_easy_one_on_the_cheapest():
    small, large = sized("test:small", "cheap"), sized("test:large", "strong")
    p = plan(
        step("h", models=["test:small", "test:large"], difficulty="hard"), step("e", models=["test:small", "test:large"], difficulty="easy")
    )
    result, events = run(registry(small, large), p)
    assert result.outputs() == {"h": "strong", "e": "cheap"} and (calls(small), calls(large)) == (1, 1)
    routed = {e.step_id: (e.start, e.router, e.difficulty) for e in kinds(events, "step_routed")}
    assert routed == {"h": ("test:large", "difficulty", "hard"), "e": ("test:small", "difficulty", "easy")}
    assert "declared hard" in kinds(events, "step_routed")[0].reason


def test_routers_by_worker_first_of_and_broken_ones():
    s = plan(step(models=["test:small", "test:large"])).steps[0]
    models = ["test:small", "test:large"]
    assert ByWorker({"writer": "test:large"}).start(s, models) == RouteChoice("test:large", "steps of 'writer' start on test:large")
    assert ByWorker({"writer": "test:other"}).start(s, models) is None  # not in the cascade: no opinion
    assert ByWorker({"coder": "test:large"}).start(s, models) is None
    chain = FirstOf([ByDifficulty(), ByWorker({"writer": "test:large"})])
    assert chain.name == "difficulty+worker" and chain.start(s, models).model == "test:large"
    assert FirstOf([ByDifficulty()]).start(s, models).model == "test:small"
    assert FirstModel().start(s, models).model == "test:small"

    class Broken:
        name = "broken"

        def start(self, step, models):
            raise RuntimeError("boom")

    class Outside:
        name = "outside"

        def start(self, step, models):
            return RouteChoice("test:elsewhere", "why not")

    assert route_step(Broken(), s, models) == (0, "router 'broken' failed (RuntimeError: boom): the cascade starts on its first model")
    at, reason = route_step(Outside(), s, models)
    assert at == 0 and "not in the cascade" in reason
    small, large = sized("test:small", "ok"), sized("test:large", "ok")
    result, events = run(registry(small, large), plan(step(models=models)), model_router=Broken())
    assert result.ok and "failed (RuntimeError: boom)" in kinds(events, "step_routed")[0].reason


def test_a_role_cascade_applies_to_its_task_steps_and_a_steps_own_models_win():
    small, large, other = sized("test:small", ""), sized("test:large", "role's"), sized("test:other", "step's")
    reg = registry(small, large, other)
    p = plan(step("r", success_criteria=["not_empty"]), step("s", models=["test:other"]))
    result, _ = run(reg, p, cascades={"writer": ["test:small", "test:large"]})
    assert result.outputs() == {"r": "role's", "s": "step's"}
    assert [a.model for a in result.steps["r"].model_attempts] == ["test:small", "test:large"]
    assert [a.model for a in result.steps["s"].model_attempts] == ["test:other"]


def _fill(store: Any, reg: Registry, p: Plan, n: int) -> None:
    async def go() -> None:
        for i in range(n):
            await Engine(reg, store=store, model_router=FirstModel()).start(p, run_id=f"past-{i}").result()  # every step tries the cheapest

    asyncio.run(go())


def test_the_learned_router_reads_past_attempts_from_a_sqlite_store(tmp_path):
    store = open_store(str(tmp_path / "runs.db"))
    small = sized("test:small", lambda request: "" if "hard" in request.messages[-1].content else "fine")
    large = sized("test:large", "strong")
    reg = registry(small, large)
    cascade = ["test:small", "test:large"]
    past = plan(
        step("h", models=cascade, difficulty="hard", instruction="a hard one", success_criteria=["not_empty"]),
        step("e", models=cascade, difficulty="easy", instruction="an easy one", success_criteria=["not_empty"]),
    )
    _fill(store, reg, past, 3)
    router = LearnedRouter(store, threshold=0.5, min_attempts=3)
    records = router.refresh()
    assert (records[("writer", "hard", "test:small")].succeeded, records[("writer", "hard", "test:small")].attempts) == (0, 3)
    assert records[("writer", "easy", "test:small")].rate == 1.0 and records[("writer", "hard", "test:large")].rate == 1.0
    hard, easy = past.steps
    choice = router.start(hard, cascade)
    assert choice.model == "test:large" and "test:small succeeded 0 of 3" in choice.reason
    assert router.start(easy, cascade) is None  # the cheap model does well there: no opinion, it starts first
    # too few attempts on record: the model is tried
    assert LearnedRouter(store, min_attempts=4).start(hard, cascade) is None
    # a run routed by it: the hard step no longer pays for the cheap model's attempt
    before = calls(small)
    fresh = plan(step("h2", models=cascade, difficulty="hard", instruction="another hard one"))
    result, events = run(reg, fresh, model_router=FirstOf([router]))
    assert result.ok and calls(small) == before and kinds(events, "step_routed")[0].router == "learned"
    # every attempt failed on the cheapest and the strongest: it starts on the last
    assert LearnedRouter(store, threshold=1.0, min_attempts=1).start(hard, ["test:small"]).model == "test:small"


def test_learned_router_skips_events_without_a_model_and_refusals(tmp_path):
    store = open_store(str(tmp_path / "runs.db"))
    reg = registry()
    _fill(store, reg, plan({"id": "t", "action": "echo", "parameters": {"value": 1}}), 2)  # no model named: nothing learned
    assert LearnedRouter(store).refresh() == {}


# --- bad inputs -------------------------------------------------------------------------------------------------


def test_bad_models_are_problems_naming_the_step_and_the_field():
    reg = registry(sized("test:small", "x"))
    with pytest.raises(PlanParseError) as empty:
        Plan.from_data({"plan_id": "p", "goal": "g", "steps": [step(models=[])]})
    (problem,) = empty.value.problems
    assert (problem.step_id, problem.field) == ("a", "models") and "empty list" in problem.message
    with pytest.raises(PlanParseError) as shape:
        Plan.from_data({"plan_id": "p", "goal": "g", "steps": [step(models=["gpt4", "test:small", "test:small"])]})
    assert [(p.step_id, p.field) for p in shape.value.problems] == [("a", "models")]
    with pytest.raises(PlanValidationError) as unknown:
        Engine(reg).start(plan(step(models=["test:small", "nope:model"])))
    (problem,) = unknown.value.problems
    assert (problem.rule, problem.step_id, problem.field) == (
        "unknown_model",
        "a",
        "models.1",
    ) and "unknown provider 'nope'" in problem.message
    with pytest.raises(PlanValidationError) as tool_step:
        Engine(reg).start(plan({"id": "t", "action": "echo", "parameters": {"value": 1}, "models": ["test:small"]}))
    (problem,) = tool_step.value.problems
    assert (problem.rule, problem.step_id, problem.field) == ("models_without_model", "t", "models")
    with pytest.raises(RegistryError, match="works with no model"):
        reg.on_model(reg.worker("tool"), "test:small")


def test_bad_cascades_and_routers_in_settings_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"cascades\['writer'\] must name at least one model"):
        EngineConfig(cascades={"writer": []})
    with pytest.raises(ValueError, match="names a model twice"):
        EngineConfig(cascades={"writer": ["a:b", "a:b"]})
    with pytest.raises(ValueError, match="model_router must have a name"):
        EngineConfig(model_router=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cascades\['tool'\]: worker 'tool' works with no model of its own"):
        Engine(registry(), cascades={"tool": ["test:own"]})
    with pytest.raises(ValueError, match=r"cascades\['writer'\]: model 'nope:x': unknown provider 'nope'"):
        Engine(registry(), cascades={"writer": ["nope:x"]})
    with pytest.raises(ValueError, match=r"roles\['writer'\] is an empty cascade"):
        ModelOptions(roles={"writer": []})
    (tmp_path / "planexec.toml").write_text("[planexec.role_models]\nwriter = []\n")
    with pytest.raises(ConfigError, match="writer: a cascade names at least one model"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="unknown provider 'nope'"):
        ModelSettings(Config(role_models={"writer": ["openai:a", "nope:b"]}), env={})
    with pytest.raises(ConfigError, match="known routers are first, difficulty, learned"):
        load_router("cheapest")
    with pytest.raises(ConfigError, match="needs a run store"):
        load_router("learned")
    with pytest.raises(ConfigError, match="has no 'nothing'"):
        load_router("planexec.engine.cascade:nothing")
    assert isinstance(load_router(["difficulty", "first"]), FirstOf)


# --- configuration and the team ---------------------------------------------------------------------------------


def test_role_models_may_list_a_cascade_in_planexec_toml_and_the_environment(tmp_path):
    (tmp_path / "planexec.toml").write_text('[planexec.role_models]\nwriter = ["openai:small", "openai:large"]\ncoder = "openai:c"\n')
    config = load_config(tmp_path)
    settings = ModelSettings(config, env={"PLANEXEC_MODEL_CRITIC": "openai:a, openai:b"})
    assert settings.cascades() == {"writer": ("openai:small", "openai:large"), "critic": ("openai:a", "openai:b")}
    assert settings.for_role("writer").name == "openai:small"
    assert "role writer: openai:small → openai:large (a cascade) (role_models.writer in planexec.toml)" in settings.describe()
    assert EngineConfig.from_config(config).cascades == {"writer": ("openai:small", "openai:large")}


def test_a_team_takes_a_roles_cascade_and_a_router_from_its_model_options():
    small, large = ScriptedModel([""], name="test:small"), ScriptedModel(["from the large model"], name="test:large")
    draft = '{"steps": [{"id": "s1", "worker": "writer", "action": "write", "instruction": "write", "parameters": {}, "depends_on": []}]}'
    team = Team(
        ScriptedModel([draft], name="test:planner"),
        mode="plan",
        models=ModelOptions(roles={"writer": [small, large]}, router="first"),
        toolbox=Toolbox(roles=["writer"]),
    )
    assert team.engine_config.cascades == {"writer": ("test:small", "test:large")}
    assert team.registry.model("test:large") is large and isinstance(team.engine_config.model_router, FirstModel)
    assert "role writer: test:small → test:large (a cascade, given)" in team.models.notes
    # the writer's empty answer is its own success: nothing moves on without a failure
    result = team.run_sync("write something")
    assert result.ok and result.steps["s1"].model_attempts[0].model == "test:small" and not large.requests


def test_models_and_difficulty_round_trip_in_the_compact_form_and_change_the_content_hash():
    p = plan(step(models=["openai:a", "openai:b"], difficulty="hard"))
    text = print_compact(p)
    assert 'models=["openai:a", "openai:b"] difficulty=hard' in text
    assert parse_compact(text, goal="g", plan_id="p") == p
    bare = plan(step())
    assert "models" not in bare.to_json() and bare.content_hash != p.content_hash
    assert plan(step(difficulty="easy")).content_hash != bare.content_hash


# --- resume ----------------------------------------------------------------------------------------------------


def test_resuming_after_a_crash_at_any_event_never_runs_a_finished_attempt_again(tmp_path):
    """Every prefix of a real cascade's events is a crash to resume from: a failed attempt on the cheap model never
    runs again, and a step cut off on the strong model goes on on the strong model."""

    def setup() -> tuple[Registry, ManagedModel, ManagedModel]:
        small, large = sized("test:small", ""), sized("test:large", "strong")
        reg = registry(small, large)
        reg.workers["writer"].idempotent = True  # its attempts may run again after a crash
        return reg, small, large

    p = plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"]))
    reg, _, _ = setup()
    source = open_store(str(tmp_path / "source.db"))

    async def first() -> Any:
        r = Engine(reg, store=source).start(p, run_id="r1")
        await r.result()
        return r

    history = asyncio.run(first()).history
    for cut in range(1, len(history)):
        store = open_store(str(tmp_path / f"cut-{cut}.db"))
        store.save_plan("r1", p)
        store.append(history[:cut])
        escalated = any(e.type == "step_failed" and e.then == "escalate" for e in history[:cut])
        reg, small, large = setup()

        async def again(reg: Registry = reg, store: Any = store) -> Any:
            return await Engine(reg, store=store).resume("r1").result()

        result = asyncio.run(again())
        assert result.ok and result.answer == "strong", cut
        if escalated:
            assert calls(small) == 0, cut  # the cheap model's failed attempt is never run again
        done = any(e.type == "step_succeeded" for e in history[:cut])
        assert calls(large) == (0 if done else 1), cut  # a finished attempt is kept, a cut-off one runs once more
        rec = result.steps["a"]
        assert [a.model for a in rec.model_attempts].count("test:small") == 1, cut
        assert rec.model_attempts[-1].model == "test:large" and rec.model_attempts[-1].error is None, cut


# --- what a person sees ----------------------------------------------------------------------------------------


def test_show_and_logs_say_which_model_each_attempt_ran_on_and_what_it_cost(tmp_path, capsys):
    from planexec.cli.main import main

    db = str(tmp_path / "runs.db")
    store = open_store(db)
    small, large = sized("test:small", ""), sized("test:large", "the answer")
    p = plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"]))

    async def go() -> Any:
        return await Engine(registry(small, large), store=store).start(p, run_id="r1").result()

    result = asyncio.run(go())
    first, second = result.steps["a"].model_attempts
    from planexec.web.views import run_detail  # the console's step panel says the same

    (panel,) = run_detail(store, "r1").steps
    assert panel["models"] == [
        f"attempt 1 on test:small: {first.usage.input_tokens} tokens in, 0 out, 1 model calls, {first.usage.describe_cost()}: check_failed → escalate",
        f"attempt 2 on test:large: {second.usage.input_tokens} tokens in, {second.usage.output_tokens} out, 1 model calls, "
        f"{second.usage.describe_cost()}: succeeded",
    ]
    store.close()
    assert main(["show", "r1", "--store", db]) == 0
    out = capsys.readouterr().out
    assert "models: test:small → test:large" in out
    assert (
        f"attempt 1 on test:small: 1 model calls, {first.usage.total_tokens} tokens, {first.usage.describe_cost()}: check_failed → escalate"
        in out
    )
    assert f"attempt 2 on test:large: 1 model calls, {second.usage.total_tokens} tokens, {second.usage.describe_cost()}: succeeded" in out
    assert main(["logs", "r1", "--store", db]) == 0
    out = capsys.readouterr().out
    assert "a: starts on test:small of test:small → test:large (router difficulty" in out
    assert "a: attempt 1 on test:small failed (check_failed): the next runs on test:large" in out
    assert f"a: succeeded (attempt 2 on test:large, {second.usage.describe_cost()}" in out


# --- the scripted models of two sizes -----------------------------------------------------------------------------


def test_a_tier_model_works_the_step_it_is_given_with_its_odds_the_same_on_every_run():
    from planexec.eval.oracle import TierModel

    @tool(read_only=True, untrusted_output=False)
    def population(city: str) -> int:
        """People in a city."""
        return {"Avalon": 84200}[city]

    tasks = [f"task {i}" for i in range(200)]
    level = {t: ("hard" if i % 2 else "easy") for i, t in enumerate(tasks)}

    def tier(name: str, seed: int = 0, wrong: float = 0.0) -> TierModel:
        return TierModel(
            name=name, success={"easy": 0.9, "hard": 0.2}, difficulty=lambda task: level.get(task, "easy"), seed=seed, wrong=wrong
        )

    a, again, other = tier("test:a"), tier("test:a"), tier("test:a", seed=1)
    first = [a.succeeds(t) for t in tasks]
    assert first == [again.succeeds(t) for t in tasks] and first != [other.succeeds(t) for t in tasks]
    easy = [ok for t, ok in zip(tasks, first) if level[t] == "easy"]
    hard = [ok for t, ok in zip(tasks, first) if level[t] == "hard"]
    assert 0.8 < sum(easy) / len(easy) <= 1 and 0.05 < sum(hard) / len(hard) < 0.35  # drawn near its odds
    with pytest.raises(ValueError, match="between 0 and 1"):
        TierModel(name="test:x", success={"easy": 1.5})

    reg = Registry.default()
    sure = TierModel(name="test:sure", success={"easy": 1.0})
    never = TierModel(name="test:never", success={"easy": 0.0})
    liar = TierModel(name="test:liar", success={"easy": 0.0}, wrong=1.0)
    reg.add_worker(
        RoleWorker("analyst", model=sure, description="looks up", system_prompt="Look up.", tools=[population], tasks=("lookup",))
    )
    for m in (never, liar):
        reg.add_model(m)
    p = plan(
        {"id": "s", "worker": "analyst", "action": "lookup", "parameters": {"tool": "population", "arguments": {"city": "Avalon"}}},
        {
            "id": "n",
            "worker": "analyst",
            "action": "lookup",
            "models": ["test:never"],
            "parameters": {"tool": "population", "arguments": {"city": "Avalon"}},
        },
        {
            "id": "w",
            "worker": "analyst",
            "action": "lookup",
            "models": ["test:liar"],
            "parameters": {"tool": "population", "arguments": {"city": "Avalon"}},
        },
    )
    result, _ = run(reg, p)
    assert result.outputs() == {"s": "84200", "n": "", "w": "84201"}  # the tool's result, nothing, a wrong number
    assert [r.tools for r in (result.steps["s"].output.provenance, result.steps["w"].output.provenance)] == [["population"]] * 2


def test_a_planners_compact_draft_that_names_models_or_a_difficulty_goes_back_for_repair():
    from planexec import Planner

    reg = registry()
    bad = '1. writer.write: "a poem" models=["openai:a"] difficulty=hard answer\n'
    good = '1. writer.write: "a poem" answer\n'
    planning = asyncio.run(Planner(ScriptedModel([bad, good]), reg, plan_format="compact").draft("a poem"))
    assert planning.repairs == 1 and planning.plan.steps[0].models is None
    problems = " ".join(planning.drafts[0].problems)
    assert "models is set by whoever reviews the plan" in problems and "difficulty is set by whoever reviews the plan" in problems


def test_the_routing_example_runs_offline_and_the_hard_step_moves_or_starts_on_the_strong_model(capsys):
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).resolve().parent.parent / "examples" / "routing" / "cascade.py"), run_name="__main__")
    out = capsys.readouterr().out
    first, difficulty = out.split("router difficulty:")
    assert first.startswith("router first: succeeded, answer 518.3")
    assert "density attempt 1 on test:cheap" in first and "check_failed → escalate" in first and "density attempt 2 on test:strong" in first
    assert "density attempt 1 on test:strong" in difficulty and "succeeded, answer 518.3" in difficulty


def test_planexec_run_of_a_plan_file_takes_the_model_router_of_planexec_toml(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from planexec.cli.main import main

    example = Path(__file__).resolve().parent.parent / "examples" / "routing"
    monkeypatch.chdir(tmp_path)
    args = ["run", "--plan", str(example / "plan.json"), "--tools", str(example / "tools.py"), "--no-store", "--json"]
    (tmp_path / "planexec.toml").write_text('[planexec]\nmodel_router = "first"\n')
    assert main(args) == 0
    density = __import__("json").loads(capsys.readouterr().out)["steps"]["density"]
    assert [a["model"] for a in density["model_attempts"]] == ["test:cheap", "test:strong"]  # first: the cheap model, then on
    (tmp_path / "planexec.toml").write_text('[planexec]\nmodel_router = "learned"\n')
    assert main(args) == 2
    assert "model_router in planexec.toml: model router 'learned' reads the attempts of past runs" in capsys.readouterr().err
    (tmp_path / "planexec.toml").write_text('[planexec]\nmodel_router = "cheapest"\n')
    assert main(["plan", "a goal", "--model", "openai:x"]) == 2
    assert "known routers are first, difficulty, learned" in capsys.readouterr().err


def test_a_planners_json_draft_or_any_revision_that_names_models_goes_back_for_repair():
    """A model that does not decode under the JSON draft schema may still write `models` or `difficulty`: the JSON draft
    and a revision (in either form) are repaired as the compact draft is, so a replan cannot widen a step's cost."""
    import json

    from planexec import Planner
    from planexec.engine.replan import ReplanContext
    from planexec.engine.results import ReplanRequest
    from planexec.planning.replanner import PlannerReplanner

    reg = registry()
    core = {"id": "s1", "worker": "writer", "action": "write", "instruction": "a poem", "parameters": {}, "depends_on": []}
    bad = json.dumps({"steps": [{**core, "models": ["openai:gpt-4.1"], "difficulty": "hard"}]})
    good = json.dumps({"steps": [core]})
    planning = asyncio.run(Planner(ScriptedModel([bad, good]), reg).draft("a poem"))
    assert planning.repairs == 1 and planning.plan.steps[0].models is None and planning.plan.steps[0].difficulty is None
    assert "models is set by whoever reviews the plan" in " ".join(planning.drafts[0].problems)

    old = plan(step("s1", failure_action="replan"))
    context = ReplanContext(goal="g", plan=old, done={}, failures={}, request=ReplanRequest(reason="r"))
    for form, bad_revision, good_revision in (
        (
            "json",
            json.dumps({"steps": [{**core, "id": "s2", "models": ["openai:gpt-4.1"]}]}),
            json.dumps({"steps": [{**core, "id": "s2"}]}),
        ),
        ("compact", '2. writer.write: "a poem" models=["openai:gpt-4.1"] answer\n', '2. writer.write: "a poem" answer\n'),
    ):
        model = ScriptedModel([bad_revision, good_revision])
        revision = asyncio.run(PlannerReplanner(Planner(model, reg, plan_format=form)).replan(context))
        assert [s.models for s in revision.steps] == [None], form
        assert "models is set by whoever reviews the plan" in model.requests[1].messages[-1].content, form


def test_the_learned_router_skips_a_tampered_run_and_a_failing_store_is_not_read_on_every_step(tmp_path):
    from planexec.errors import StoreError

    store = open_store(str(tmp_path / "runs.db"))
    reg = registry(sized("test:small", ""), sized("test:large", "strong"))
    cascade = ["test:small", "test:large"]
    past = plan(step("h", models=cascade, difficulty="hard", success_criteria=["not_empty"]))
    _fill(store, reg, past, 4)
    bad = store.runs(limit=None)[0].run_id

    class Tampered:  # one run's events no longer read (a tampered row, an event of a schema it cannot parse)
        reads = 0
        down = False

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def runs(self, **kw: Any) -> Any:
            Tampered.reads += 1
            if Tampered.down:
                raise StoreError("the store is down")
            return store.runs(**kw)

        def events(self, run_id: str, *args: Any, **kw: Any) -> Any:
            if run_id == bad:
                raise StoreError(f"run {run_id}: event 3 is not an event")
            return store.events(run_id, *args, **kw)

    router = LearnedRouter(Tampered(), threshold=0.5, min_attempts=3)
    records = router.refresh()  # the other three runs still count
    assert records[("writer", "hard", "test:small")].attempts == 3
    assert router.start(past.steps[0], cascade).model == "test:large"

    Tampered.down, Tampered.reads = True, 0
    blind = LearnedRouter(Tampered(), max_age=60)
    for _ in range(5):  # no opinion, and the store is asked once, not once per step
        assert route_step(blind, past.steps[0], cascade) == (0, "no rule applies: the cascade starts on its first model")
    assert Tampered.reads == 1


def test_an_attempt_abandoned_after_its_timeout_names_its_model_on_the_event_and_the_record():
    """A model call that ignores its step's timeout is abandoned (the failure action applies, no next model: it may
    still be running); its `StepFailed` and the step's record still say which model of the cascade it ran on."""
    stop = {"flag": False}

    async def stubborn(request: Any) -> str:
        while not stop["flag"]:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue  # swallows every cancellation
        return "late"

    reg = registry(FunctionModel(stubborn, name="test:hang"), FunctionModel(lambda request: "fine", name="test:large"))
    p = plan(step(models=["test:hang", "test:large"], timeout=0.05, failure_action="skip"))

    async def go() -> Any:
        events: list[Any] = []
        result = await asyncio.wait_for(Engine(reg, cancel_grace=0.1, on_event=events.append).run(p), 5)
        stop["flag"] = True
        return result, events

    result, events = asyncio.run(go())
    rec = result.steps["a"]
    assert rec.error.rule == "timeout" and "abandoned" in rec.error.message
    failed = kinds(events, "step_failed")[-1]
    assert failed.model == "test:hang" and failed.then == "skip"
    assert [(a.model, a.error.rule, a.then) for a in rec.model_attempts] == [("test:hang", "timeout", "skip")]
    assert [(a.model, a.then) for a in replay(events).steps["a"].model_attempts] == [("test:hang", "skip")]


def test_an_async_router_is_refused_by_name_and_never_leaves_a_coroutine_unawaited(tmp_path):
    import gc
    import warnings

    (tmp_path / "myrouter.py").write_text(
        "from planexec.policies import RouteChoice\n\n"
        "class Slow:\n"
        "    name = 'slow'\n\n"
        "    async def start(self, step, models):\n"
        "        return RouteChoice(models[-1], 'asked a service')\n"
    )
    with pytest.raises(ConfigError, match=r"model router '.*myrouter.py:Slow': its start\(step, models\) is async"):
        load_router(f"{tmp_path / 'myrouter.py'}:Slow")

    class Slow:  # given as an object (`EngineConfig.model_router`): the step starts on its first model, and says why
        name = "slow"

        async def start(self, step: Any, models: Any) -> RouteChoice:
            return RouteChoice(models[-1], "asked a service")

    s = plan(step(models=["test:small", "test:large"])).steps[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        at, reason = route_step(Slow(), s, s.models)
        gc.collect()
    assert at == 0 and reason.startswith("router 'slow' is async: start must return a RouteChoice") and "coroutine object" not in reason
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_a_run_stopped_by_the_events_of_an_escalation_starts_no_attempt_on_the_next_model(tmp_path):
    from planexec.errors import StoreError
    from planexec.store import open_store as opened

    real = opened(str(tmp_path / "runs.db"))

    class Full:  # the store fails as the escalating StepFailed is written: the run is cancelled
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def append(self, events: Any, *args: Any, **kw: Any) -> Any:
            if any(e.type == "step_failed" and e.then == "escalate" for e in events):
                raise StoreError("disk full")
            return real.append(events, *args, **kw)

    small, large = sized("test:small", ""), sized("test:large", "the poem")
    result, events = run(
        registry(small, large), plan(step(models=["test:small", "test:large"], success_criteria=["not_empty"])), store=Full()
    )
    assert result.status.value == "cancelled" and "disk full" in result.reason
    assert [e.model for e in kinds(events, "step_started")] == ["test:small"] and calls(large) == 0
    rec = result.steps["a"]
    assert rec.state.value == "cancelled" and rec.attempts == 1
