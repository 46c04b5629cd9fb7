"""Training data from the store: a store filled by scripted runs (a repair, a person's edit, a replan, a refusal, untrusted
output) gives the supervised records and preference pairs it should, filtered, deduplicated, split and redacted."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from planexec.cli.main import main
from planexec.governance.review import ReviewOutcome
from planexec.library.learning import learn_template
from planexec.library.training import TRAINING_FILES, TrainingFilter, export_training, training_set
from planexec.models.providers import register_provider
from planexec.plan.model import Plan
from planexec.runs import edit_plan
from planexec.secrets import refresh_secrets
from planexec.store import open_store
from planexec.team.settings import PlanningOptions, ReviewOptions, Submission
from planexec.team.team import Team
from planexec.testing import ScriptedModel
from planexec.workers.tools import Tool


def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


def search(query: str) -> str:
    """Search the web (its text is the outside world's)."""
    return f"results for {query}: the answer is 42"


_flaky_calls: list[str] = []


def flaky(key: str) -> int:
    """Read a number that is down the first time it is asked for."""
    _flaky_calls.append(key)
    if len(_flaky_calls) == 1:
        raise RuntimeError("the service is down")
    return 7


TOOLS = [
    Tool(add, untrusted_output=False, read_only=True),
    Tool(search, read_only=True),  # untrusted output (the default)
    Tool(flaky, untrusted_output=False, read_only=True),
]


def step(sid: str, action: str, params: dict, deps: list[str] | None = None, **more) -> dict:
    return {"id": sid, "worker": "tool", "action": action, "instruction": f"do {action}", "parameters": params,
            "depends_on": deps or [], **more} if "instruction" not in more else {
            "id": sid, "worker": "tool", "action": action, "parameters": params, "depends_on": deps or [], **more}  # fmt: skip


def draft(*steps: dict, answer: str | None = None) -> str:
    data: dict = {"steps": list(steps)}
    if answer:
        data["answer_step"] = answer
    return json.dumps(data)


ADD_17_25 = draft(step("s1", "add", {"a": 17, "b": 25}), answer="s1")
BAD_DRAFT = draft(step("s1", "multiply", {"a": 17, "b": 25}), answer="s1")  # no such tool: sent back for repair


@pytest.fixture
def answers(monkeypatch, tmp_path):
    """The provider ``script:NAME`` answering from one shared queue."""
    queue: list = []

    def take(model: str, options) -> ScriptedModel:  # each team's planner answers what was queued before it was made
        made = ScriptedModel(list(queue), name=f"script:{model}")
        queue.clear()
        return made

    register_provider("script", take, replace=True)
    monkeypatch.chdir(tmp_path)
    _flaky_calls.clear()
    return queue


def team(store, reuse: bool | list[str] = False, **review) -> Team:
    return Team(
        "script:planner", tools=TOOLS, mode="plan", store=store, planning=PlanningOptions(routing="planner", reuse=reuse),
        review=ReviewOptions(auto_approve=True, **review),
    )  # fmt: skip


def run(t: Team, goal: str):
    return asyncio.run(t.run(goal))


def records(found, kind: str) -> list[dict]:
    return [*getattr(found, kind), *getattr(found, f"{kind}_holdout")]


@pytest.fixture
def filled(answers, tmp_path):
    """A store with: a run repaired once; a run a person edited in review; a run replanned after a failure; a failed run."""
    store = open_store(tmp_path / "runs.db")
    answers += [BAD_DRAFT, ADD_17_25]
    assert run(team(store), "What is 17 plus 25?").answer == 42

    def edit(plan: Plan, review) -> ReviewOutcome:
        edited = plan.model_copy(update={"steps": [plan.steps[0].model_copy(update={"parameters": {"a": 20, "b": 22}})]})
        return ReviewOutcome(decision="approve", by="person", reason="use 20 and 22", plan=edited, edited=True)

    answers += [draft(step("s1", "add", {"a": 1, "b": 2}), answer="s1")]
    assert run(team(store, reviewer=edit), "Add twenty and twenty-two").answer == 42

    answers += [
        draft(step("s1", "flaky", {"key": "x"}, failure_action="replan"), step("s2", "add", {"a": "${s1}", "b": 1}, ["s1"]), answer="s2"),
        draft(step("s3", "flaky", {"key": "y"}), step("s4", "add", {"a": "${s3}", "b": 1}, ["s3"]), answer="s4"),
    ]
    assert run(team(store), "Read the number and add one").answer == 8

    answers += [draft(step("s1", "flaky", {"key": "z"}), answer="s1")]
    _flaky_calls.clear()  # down again: the run fails
    assert run(team(store), "Read z").status.value == "aborted"
    return store


def test_a_store_of_scripted_runs_gives_supervised_records_of_the_plans_that_ran(filled):
    found = training_set(filled, TrainingFilter(holdout=0.0))
    sft = {r["metadata"]["goal"]: r for r in records(found, "sft")}
    assert set(sft) == {"What is 17 plus 25?", "Add twenty and twenty-two", "Read the number and add one"}
    assert found.left_out == {"status": 1}  # the failed run, by its reason
    repaired = sft["What is 17 plus 25?"]
    roles = [m["role"] for m in repaired["messages"]]
    assert roles[0] == "system" and roles[-2:] == ["user", "assistant"]
    system = repaired["messages"][0]["content"]
    assert "add(a: integer, b: integer)" in system and "flaky" in system  # the catalogue, as it was at run time
    assert repaired["messages"][-2]["content"] == "Goal: What is 17 plus 25?"
    assert repaired["messages"][-1]["content"] == ADD_17_25  # the model's own accepted text
    meta = repaired["metadata"]
    assert meta["repairs"] == 1 and meta["planner_model"] == "script:planner" and meta["format"] == "json"
    assert meta["status"] == "succeeded" and not meta["reviewed_by_person"]
    # the person's edit ran, not the planner's draft: the target is the edited plan, in the draft's form
    edited = json.loads(sft["Add twenty and twenty-two"]["messages"][-1]["content"])
    assert edited["steps"][0]["parameters"] == {"a": 20, "b": 22} and sft["Add twenty and twenty-two"]["metadata"]["reviewed_by_person"]
    # the replanned run's target is the version that ran last, keeping the finished steps
    replanned = json.loads(sft["Read the number and add one"]["messages"][-1]["content"])
    assert [s["id"] for s in replanned["steps"]] == ["s3", "s4"] and replanned["answer_step"] == "s4"


def test_preference_pairs_set_each_rejected_plan_against_the_one_that_ran(filled):
    found = training_set(filled, TrainingFilter(holdout=0.0))
    pairs = {(r["metadata"]["kind"], r["metadata"]["goal"]): r for r in records(found, "pairs")}
    assert set(pairs) == {
        ("invalid", "What is 17 plus 25?"),
        ("edited", "Add twenty and twenty-two"),
        ("replanned", "Read the number and add one"),
    }
    invalid = pairs["invalid", "What is 17 plus 25?"]
    assert invalid["rejected"] == [{"role": "assistant", "content": BAD_DRAFT}]
    assert invalid["chosen"] == [{"role": "assistant", "content": ADD_17_25}]
    assert "multiply" in invalid["metadata"]["why"]  # the problem the draft was sent back with
    assert invalid["prompt"][-1] == {"role": "user", "content": "Goal: What is 17 plus 25?"}
    edit = pairs["edited", "Add twenty and twenty-two"]
    assert json.loads(edit["rejected"][0]["content"])["steps"][0]["parameters"] == {"a": 1, "b": 2}
    assert json.loads(edit["chosen"][0]["content"])["steps"][0]["parameters"] == {"a": 20, "b": 22}
    replan = pairs["replanned", "Read the number and add one"]
    assert "the service is down" in replan["metadata"]["why"]
    assert [s["id"] for s in json.loads(replan["rejected"][0]["content"])["steps"]] == ["s1", "s2"]
    only = training_set(filled, TrainingFilter(holdout=0.0, pairs=frozenset({"edited"})))
    assert [r["metadata"]["kind"] for r in records(only, "pairs")] == ["edited"]


def test_filters_by_person_status_model_date_and_refused_calls(filled):
    person = training_set(filled, TrainingFilter(holdout=0.0, by_person=True))
    assert [r["metadata"]["goal"] for r in records(person, "sft")] == ["Add twenty and twenty-two"]
    assert person.left_out["not_by_person"] == 2
    anyhow = training_set(filled, TrainingFilter(holdout=0.0, statuses=frozenset()))
    assert len(records(anyhow, "sft")) == 4
    failed = training_set(filled, TrainingFilter(holdout=0.0, statuses=frozenset({"aborted"})))
    assert [r["metadata"]["goal"] for r in records(failed, "sft")] == ["Read z"]
    assert not records(training_set(filled, TrainingFilter(model="openai:gpt-4o")), "sft")
    assert len(records(training_set(filled, TrainingFilter(holdout=0.0, model="script:planner")), "sft")) == 3
    later = datetime.now(UTC) + timedelta(hours=1)
    assert training_set(filled, TrainingFilter(since=later, statuses=frozenset())).left_out == {"date": 4}
    assert len(records(training_set(filled, TrainingFilter(holdout=0.0, until=later)), "sft")) == 3
    # the replanned run's first attempt failed, but no call was refused: the filter keeps all three
    assert len(records(training_set(filled, TrainingFilter(holdout=0.0, no_refused_calls=True)), "sft")) == 3


def test_a_run_with_a_refused_call_is_left_out_when_asked(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    secret_step = {"id": "s1", "worker": "tool", "action": "add", "instruction": "add", "parameters": {"a": 1, "b": 2},
                   "depends_on": [], "capabilities": [{"tool": "search"}]}  # fmt: skip
    answers += [draft(secret_step, answer="s1")]
    assert run(team(store), "One plus two").answer == 3
    events = store.events(store.runs()[0].run_id)
    assert not any(e.type == "tool_call_decided" and not e.call.allowed for e in events)  # a tool step asks no gate
    # a refusal recorded by the gate is what the filter reads: plant one with the store's own API
    from planexec.engine.events import ToolCallDecided
    from planexec.workers.gate import CallRecord

    run_id = store.runs()[0].run_id
    refused = CallRecord(step_id="s1", attempt=1, worker="tool", tool="search", allowed=False, rule="not_granted", reason="not granted")
    store.append([ToolCallDecided(run_id=run_id, seq=store.last_seq(run_id) + 1, at=datetime.now(UTC), step_id="s1", call=refused)])
    assert training_set(store, TrainingFilter(no_refused_calls=True)).left_out == {"refused_calls": 1}
    assert len(records(training_set(store, TrainingFilter(holdout=0.0)), "sft")) == 1


def test_duplicates_are_kept_once_and_a_goal_is_on_one_side_of_the_split(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    goals = [f"What is {n} plus 25?" for n in range(100, 130)]
    for n, goal in enumerate(goals):
        answers += [draft(step("s1", "add", {"a": n, "b": 25}), answer="s1")]
        run(team(store), goal)
    answers += [ADD_17_25]
    run(team(store), "What is 17 plus 25?")
    answers += [ADD_17_25]
    run(team(store), "what is 17  plus 25?")  # the same goal, spaced and cased differently, and the same plan
    found = training_set(store, TrainingFilter(holdout=0.3))
    assert found.duplicates == 1
    train, held = records(found, "sft")[: len(found.sft)], found.sft_holdout
    assert len(train) + len(held) == 31 and 0 < len(held) < 31
    assert not {r["metadata"]["goal"].lower() for r in train} & {r["metadata"]["goal"].lower() for r in held}
    again = training_set(store, TrainingFilter(holdout=0.3))  # the split is a function of the goal: the same every time
    assert [r["metadata"]["goal"] for r in again.sft_holdout] == [r["metadata"]["goal"] for r in held]


def test_untrusted_tool_output_never_enters_a_record_unless_asked(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    answers += [
        draft(step("s1", "search", {"query": "meaning"}), step("s2", "flaky", {"key": "x"}, ["s1"], failure_action="replan"), answer="s2"),
        # the replanner read the search's text and copies it into the new plan
        draft(step("s3", "flaky", {"key": "results for meaning: the answer is 42"}), answer="s3"),
    ]
    assert run(team(store), "Find the meaning and read it").status.value == "succeeded"
    found = training_set(store, TrainingFilter(holdout=0.0))
    assert not records(found, "sft") and not records(found, "pairs")
    assert found.left_out == {"untrusted": 1}
    dump = json.dumps(found.manifest(TrainingFilter()))
    assert "the answer is 42" not in dump
    asked = training_set(store, TrainingFilter(holdout=0.0, include_untrusted=True))
    (sft,) = records(asked, "sft")
    assert "the answer is 42" in sft["messages"][-1]["content"]


def read_knowing(store, filters: TrainingFilter, monkeypatch, **keys: str):
    """`training_set` in a process that knows `keys` (environment secrets set only now: the store kept them as written)."""
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    refresh_secrets()
    try:
        return training_set(store, filters)
    finally:
        for name in keys:
            monkeypatch.delenv(name)
        refresh_secrets()


def test_secrets_are_redacted_in_every_record(answers, tmp_path, monkeypatch):
    store = open_store(tmp_path / "runs.db")
    answers += [draft(step("s1", "add", {"a": 1, "b": 2}, instruction="x"), answer="s1")]
    answers[-1] = answers[-1].replace('"do add"', '"add with token sk-live-0123456789abcdef"')
    run(team(store), "Add one and two for sk-live-0123456789abcdef")
    # a key this process knows only now
    found = read_knowing(store, TrainingFilter(holdout=0.0), monkeypatch, LEAKED_API_KEY="sk-live-0123456789abcdef")
    text = json.dumps([*records(found, "sft"), *records(found, "pairs")])
    assert records(found, "sft") and "sk-live-0123456789abcdef" not in text and "[redacted:LEAKED_API_KEY]" in text


def test_a_plan_refused_in_the_store_is_paired_with_the_plan_that_ran_for_its_goal(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    answers += [draft(step("s1", "add", {"a": 40, "b": 3}), answer="s1")]
    queued = asyncio.run(team(store).submit("What is 40 plus 2?", submission=Submission(by="carol")))
    store.decide_approval(queued.run_id, approved=False, by="alice", reason="that adds 3")
    answers += [draft(step("s1", "add", {"a": 40, "b": 2}), answer="s1")]
    assert run(team(store), "What is 40 plus 2?").answer == 42
    found = training_set(store, TrainingFilter(holdout=0.0))
    (pair,) = records(found, "pairs")
    assert pair["metadata"]["kind"] == "refused"
    assert json.loads(pair["rejected"][0]["content"])["steps"][0]["parameters"] == {"a": 40, "b": 3}
    assert json.loads(pair["chosen"][0]["content"])["steps"][0]["parameters"] == {"a": 40, "b": 2}
    assert pair["metadata"]["chosen_from"] != queued.run_id


def test_an_edit_made_in_the_store_is_a_pair(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    answers += [draft(step("s1", "add", {"a": 1, "b": 1}), answer="s1")]
    queued = asyncio.run(team(store).submit("What is 40 plus 2?", submission=Submission(by="carol")))
    old = store.plan_versions(queued.run_id)[-1].plan
    new = old.model_copy(update={"version": 2, "revises": 1, "steps": [old.steps[0].model_copy(update={"parameters": {"a": 40, "b": 2}})]})
    edit_plan(store, queued.run_id, content_hash=old.content_hash, plan=Plan.from_data(new.model_dump(by_alias=True)), by="bob")
    found = training_set(store, TrainingFilter(holdout=0.0, statuses=frozenset()))  # it waits for approval: any status
    (pair,) = records(found, "pairs")
    assert pair["metadata"]["kind"] == "edited" and "edited by bob" in pair["metadata"]["why"]
    assert pair["metadata"]["reviewed_by_person"]


def test_export_writes_jsonl_a_standard_reader_loads_and_a_manifest(filled, tmp_path):
    found = export_training(filled, tmp_path / "out", TrainingFilter(holdout=0.5))
    for name in TRAINING_FILES:
        lines = (tmp_path / "out" / name).read_text().splitlines()
        assert all(isinstance(json.loads(line), dict) for line in lines)
    total = sum(len((tmp_path / "out" / n).read_text().splitlines()) for n in TRAINING_FILES)
    assert total == len(records(found, "sft")) + len(records(found, "pairs")) == 6
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["runs_read"] == 4 and manifest["runs_used"] == 3
    assert manifest["left_out"] == {"status": {"runs": 1, "why": "did not end as the filter asks"}}
    # the shapes fine-tuning tools read: chat messages (OpenAI, TRL SFT) and conversational preference pairs (TRL DPO)
    for line in (tmp_path / "out" / "sft-train.jsonl").read_text().splitlines() + (
        tmp_path / "out" / "sft-holdout.jsonl"
    ).read_text().splitlines():
        messages = json.loads(line)["messages"]
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "assistant"
    for name in ("pairs-train.jsonl", "pairs-holdout.jsonl"):
        for line in (tmp_path / "out" / name).read_text().splitlines():
            pair = json.loads(line)
            assert pair["prompt"][-1]["role"] == "user" and [m["role"] for m in pair["chosen"] + pair["rejected"]] == ["assistant"] * 2


def test_export_training_cli_writes_the_files_and_says_what_it_left_out(filled, tmp_path, capsys):
    code = main(["export", "training", str(tmp_path / "cli"), "--store", str(tmp_path / "runs.db"), "--holdout", "0"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "3 supervised" in out.out and "3 preference pair" in out.out and "status" in out.out
    assert len((tmp_path / "cli" / "sft-train.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--holdout", "1.5"], "holdout"),
        (["--since", "yesterday"], "--since"),
        (["--since", "2026-11-02", "--until", "2026-11-01"], "since must be before until"),
        (["--pairs", "invalid,bogus"], "bogus"),
        (["--status", "happy"], "happy"),
    ],
)
def test_export_training_cli_refuses_bad_filters_by_name(filled, tmp_path, capsys, args, says):
    code = main(["export", "training", str(tmp_path / "bad"), "--store", str(tmp_path / "runs.db"), *args])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()  # nothing written


def test_export_training_help_documents_every_filter(capsys):
    with pytest.raises(SystemExit):
        main(["export", "training", "--help"])
    text = capsys.readouterr().out
    for option in ("--status", "--since", "--until", "--template", "--model", "--by-person", "--no-refused-calls",
                   "--pairs", "--holdout", "--include-untrusted", "--limit"):  # fmt: skip
        assert option in text, option


def test_a_run_no_planner_wrote_is_left_out_and_says_why(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    plan = Plan.from_data({"plan_id": "by-hand", "goal": "What is 1 plus 1?", "steps": [step("s1", "add", {"a": 1, "b": 1})]})
    asyncio.run(team(store).submit_plan(plan, submission=Submission(by="carol")))  # a plan file: no planner was asked
    found = training_set(store, TrainingFilter(statuses=frozenset()))
    assert found.left_out == {"no_prompt": 1} and not records(found, "sft")
    assert "older than schema 9" in found.manifest(TrainingFilter())["left_out"]["no_prompt"]["why"]


def test_the_template_filter_keeps_runs_that_reused_it_with_what_the_planner_would_have_been_asked(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    answers += [ADD_17_25]
    run(team(store), "What is 17 plus 25?")
    assert learn_template(store, store.runs()[0].run_id, registry=team(store).registry, name="adding") is not None
    # a goal the rules fit: the template's plan runs, and no planner is called (no answer is queued for one)
    reused = run(team(store, reuse=["rules"]), "What is 30 plus 12?")
    assert reused.answer == 42
    found = training_set(store, TrainingFilter(holdout=0.0, template="adding"))
    (sft,) = records(found, "sft")
    assert sft["metadata"]["template"] == "adding" and sft["metadata"]["goal"] == "What is 30 plus 12?"
    assert sft["messages"][-2]["content"] == "Goal: What is 30 plus 12?" and "add(a: integer" in sft["messages"][0]["content"]
    assert json.loads(sft["messages"][-1]["content"])["steps"][0]["parameters"] == {"a": 30, "b": 12}
    assert found.left_out == {"template": 1}


def test_a_streamed_plan_records_what_its_planner_was_asked(answers, tmp_path):
    store = open_store(tmp_path / "runs.db")
    answers += [ADD_17_25]
    t = team(store)

    async def stream():
        return await t.start_streaming("What is 17 plus 25?").result()

    assert asyncio.run(stream()).answer == 42
    (sft,) = records(training_set(store, TrainingFilter(holdout=0.0)), "sft")
    assert sft["messages"][-2]["content"] == "Goal: What is 17 plus 25?" and sft["messages"][-1]["content"] == ADD_17_25
