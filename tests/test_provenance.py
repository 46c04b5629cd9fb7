"""Provenance as a summary: of constant size whatever the plan, deciding as before, the whole chain found on demand,
and stores of the earlier shape read (schema 5) or refused by a planexec that does not know the new one (schema 6)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from planexec import Engine, Plan, Registry
from planexec.engine.events import RunStarted, StepSucceeded, utcnow
from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.results import RunStatus
from planexec.engine.runner import LocalRunner
from planexec.errors import StoreError
from planexec.store import SqliteRunStore, open_store, replay
from planexec.store import schema as store_schema
from planexec.store.audit import verify_run
from planexec.store.schema import SQLITE_APPLICATION_ID, migrate
from planexec.usage import Usage
from planexec.workers.io import UNTRUSTED_KEPT, Output, Provenance, Source, derive_untrusted, lineage


def _registry() -> Registry:
    registry = Registry()

    @registry.tool(read_only=True)  # its output is text from outside: untrusted (the default)
    def fetch(url: str) -> str:
        """Fetch a page."""
        return f"page at {url}"

    @registry.tool(read_only=True, untrusted_output=False)
    def relay(inputs: list[Any] | None = None) -> str:
        """Pass on what it was given (trusted code: it adds no untrusted origin of its own)."""
        return f"{len(inputs or ())} inputs"

    @registry.tool(sensitive=["path"])
    def save(path: str) -> str:
        """Write somewhere (its path is sensitive)."""
        return f"saved {path}"

    return registry


def _plan(steps: list[dict[str, Any]]) -> Plan:
    return Plan.from_data({"plan_id": "prov", "goal": "test provenance", "steps": [{"worker": "tool", **s} for s in steps]})


def _chain(depth: int, readers: int = 1) -> Plan:
    """`readers` fetches, then a relay taking them all, then `depth` relays each taking its parent."""
    steps = [{"id": f"r{i}", "action": "fetch", "parameters": {"url": f"https://site{i}.example"}} for i in range(readers)]
    steps.append({"id": "c0", "action": "relay", "parameters": {"inputs": [f"${{r{i}}}" for i in range(readers)]}})
    steps += [{"id": f"c{i}", "action": "relay", "parameters": {"inputs": [f"${{c{i - 1}}}"]}} for i in range(1, depth)]
    return _plan(steps)


def test_a_deep_chain_keeps_every_provenance_the_same_size_and_still_knows_it_is_untrusted():
    result = Engine(_registry()).run_sync(_chain(200))
    assert result.status is RunStatus.SUCCEEDED
    size = {i: len(result.steps[f"c{i}"].output.provenance.to_json()) for i in range(1, 200)}
    assert size[101] == size[199] and size[11] == size[99], size  # step ids of as many digits: the same size, 100 steps deeper
    last = result.steps["c199"].output
    assert last.untrusted and last.provenance.inputs == ["c198"]
    assert last.provenance.sources == [Source(kind="tool", step_id="c199", tool="relay")]  # its own step's, not its ancestors'
    assert last.provenance.untrusted_from == ["fetch@r0"] and not last.provenance.more_untrusted  # the origin, 200 steps up
    assert [s.label() for s in result.origins("c199", untrusted_only=True)] == ["fetch in step 'r0' (untrusted)"]


def test_a_value_from_many_untrusted_origins_names_the_nearest_and_says_more_exist():
    result = Engine(_registry()).run_sync(_chain(3, readers=12))
    prov = result.steps["c2"].output.provenance
    assert len(prov.untrusted_from) == UNTRUSTED_KEPT and prov.more_untrusted
    assert prov.untrusted_from == [f"fetch@{sid}" for sid in sorted(f"r{i}" for i in range(12))[:UNTRUSTED_KEPT]]  # the plan's order
    every = {s.step_id for s in result.origins("c2", untrusted_only=True)}
    assert every == {f"r{i}" for i in range(12)}  # the whole chain, found by following the inputs


def test_an_untrusted_value_far_upstream_still_refuses_a_sensitive_argument_and_says_where_it_came_from():
    steps = [{"id": f"r{i}", "action": "fetch", "parameters": {"url": f"https://site{i}.example"}} for i in range(10)]
    steps.append({"id": "c0", "action": "relay", "parameters": {"inputs": [f"${{r{i}}}" for i in range(10)]}})
    steps += [{"id": f"c{i}", "action": "relay", "parameters": {"inputs": [f"${{c{i - 1}}}"]}} for i in range(1, 30)]
    steps.append({"id": "write", "action": "save", "parameters": {"path": "${c29}"}})
    result = Engine(_registry()).run_sync(_plan(steps))
    rec = result.steps["write"]
    assert rec.state.value == "failed" and rec.error.rule == "untrusted_argument"
    assert "fetch in step 'r0' (untrusted)" in rec.error.message
    assert "more untrusted origins upstream (planexec show lists every one)" in rec.error.message
    every = {s.step_id for s in lineage([result.steps["c29"].output], _output_of(result))}
    assert {f"r{i}" for i in range(10)} <= every


def _output_of(result):
    def find(sid: str) -> Output | None:
        rec = result.steps.get(sid)
        return rec.output if rec is not None else None

    return find


def test_derive_untrusted_is_the_same_whatever_the_order_of_equal_inputs_and_never_exceeds_its_bound():
    def out(step_id: str, keys: list[str], more: bool = False) -> Output:
        prov = Provenance(
            run_id="r", plan_id="p", plan_version=1, step_id=step_id, worker="w", action="a", untrusted_from=keys, more_untrusted=more
        )
        return Output(value=None, provenance=prov)

    a, b = out("a", ["t@x", "t@y"]), out("b", ["t@y", "t@z"])
    assert derive_untrusted([], [a, b]) == (["t@x", "t@y", "t@z"], False)
    own = [Source(kind="tool", step_id="me", tool="read", untrusted=True), Source(kind="tool", step_id="me", tool="calc")]
    assert derive_untrusted(own, [a]) == (["read@me", "t@x", "t@y"], False)
    full = out("f", [f"t@{i}" for i in range(UNTRUSTED_KEPT)])
    kept, more = derive_untrusted(own, [full, b])
    assert len(kept) == UNTRUSTED_KEPT and kept[0] == "read@me" and more
    assert derive_untrusted([], [full, full]) == (full.provenance.untrusted_from, False)  # a diamond brings nothing new
    assert derive_untrusted([], [out("t", [])]) == ([], False)


def test_a_source_key_names_its_origin_and_reads_back():
    for source in (
        Source(kind="tool", step_id="read", tool="mcp.fs@v2", untrusted=True),
        Source(kind="model", step_id="s1", untrusted=True),
    ):
        assert Source.from_key(source.key) == source


def test_a_provenance_of_the_earlier_shape_is_read_and_decides_as_before():
    old = {  # schema 5: every ancestor's sources in `sources`, no summary fields
        "run_id": "r", "plan_id": "p", "plan_version": 1, "step_id": "c", "worker": "tool", "action": "relay", "attempt": 1, "tools": ["relay"],
        "sources": [
            {"kind": "tool", "step_id": "a", "tool": "fetch", "untrusted": True},
            {"kind": "tool", "step_id": "b", "tool": "relay", "untrusted": False},
        ],
    }  # fmt: skip
    prov = Provenance.from_dict(old)
    assert prov.untrusted and prov.untrusted_keys() == ["fetch@a"] and prov.inputs == []
    assert derive_untrusted([], [Output(value=1, provenance=prov)]) == (["fetch@a"], False)
    assert [s.step_id for s in lineage([Output(value=1, provenance=prov)], lambda sid: None)] == ["a", "b"]
    trusted = Provenance.from_dict({**old, "sources": [old["sources"][1]]})
    assert not trusted.untrusted


def test_the_summary_fields_are_written_only_when_set():
    prov = Provenance(run_id="r", plan_id="p", plan_version=1, step_id="s", worker="w", action="a")
    assert set(json.loads(prov.to_json())) == {
        "run_id",
        "plan_id",
        "plan_version",
        "step_id",
        "worker",
        "action",
        "attempt",
        "tools",
        "sources",
    }
    assert Provenance.from_json(prov.to_json()) == prov


def _old_store(path) -> None:
    """A store of schema 5 holding one run whose output has the earlier provenance."""
    conn = sqlite3.connect(path, isolation_level=None)
    cur = conn.cursor()
    cur.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
    assert migrate(cur, "sqlite", 0, "2026-01-01T00:00:00.000000Z", target=5) == [1, 2, 3, 4, 5]
    start = RunStarted(run_id="old", seq=0, at=utcnow(), plan_id="p", plan_version=1, content_hash="sha256:1", goal="g", step_ids=["c"])
    body = json.loads(
        StepSucceeded(run_id="old", seq=1, at=utcnow(), step_id="c", attempt=1, wall_time=0.1, usage=Usage(), output=Output(value="v", provenance=Provenance(run_id="old", plan_id="p", plan_version=1, step_id="c", worker="tool", action="relay"))).to_json()
    )  # fmt: skip
    body["output"]["provenance"]["sources"] = [{"kind": "tool", "step_id": "a", "tool": "fetch", "untrusted": True}]
    cur.execute(
        "INSERT INTO runs (run_id, status, started_at, goal) VALUES (?, ?, ?, ?)", ("old", "running", "2026-01-01T00:00:00.000000Z", "g")
    )
    for seq, (kind, text) in enumerate([(start.type, start.to_json()), ("step_succeeded", json.dumps(body))]):
        cur.execute("INSERT INTO events (run_id, seq, type, body) VALUES (?, ?, ?, ?)", ("old", seq, kind, text))
    conn.close()


def test_a_store_of_schema_5_is_migrated_and_its_outputs_keep_their_untrusted_origins(tmp_path):
    path = tmp_path / "runs.db"
    _old_store(path)
    with open_store(str(path)) as store:
        view = replay(store.events("old"))
        out = view.steps["c"].output
        assert out.untrusted and [s.label() for s in view.origins(["c"], untrusted_only=True)] == ["fetch in step 'a' (untrusted)"]
    versions = [v for (v,) in sqlite3.connect(path).execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions[-1] == store_schema.SCHEMA_VERSION >= 6  # 6 introduced the summary; later ones migrate on top


def test_a_planexec_that_knows_only_schema_5_refuses_a_store_of_schema_6(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    open_store(str(path)).close()
    newest = store_schema.SCHEMA_VERSION  # 6 or later: a store made by this planexec
    monkeypatch.setattr(store_schema, "SCHEMA_VERSION", 5)
    with pytest.raises(StoreError, match=f"schema version {newest}, newer than this planexec knows \\(5\\); upgrade planexec"):
        open_store(str(path))


def test_a_recorded_run_stores_the_summary_and_verifies(tmp_path):
    store = SqliteRunStore(tmp_path / "runs.db")
    registry = _registry()

    async def go():
        engine = Engine(registry, runner=DurableRunner(LocalRunner(registry)))
        run = engine.start(_chain(40, readers=10))
        record_run(run, store)
        return await run.result()

    import asyncio

    result = asyncio.run(go())
    assert result.ok
    view = replay(store.events(result.run_id))
    stored = view.steps["c39"].output.provenance
    assert stored == result.steps["c39"].output.provenance and stored.more_untrusted
    assert {s.step_id for s in view.origins(["c39"], untrusted_only=True)} == {f"r{i}" for i in range(10)}
    assert verify_run(store, result.run_id).ok
    store.close()


def test_a_denial_shows_its_whole_chain_in_show_and_the_console(tmp_path, monkeypatch, capsys):
    from planexec.cli.main import main
    from planexec.web.views import run_detail

    steps = [{"id": f"r{i}", "action": "fetch", "parameters": {"url": f"https://site{i}.example"}} for i in range(10)]
    steps.append({"id": "c0", "action": "relay", "parameters": {"inputs": [f"${{r{i}}}" for i in range(10)]}})
    steps += [{"id": f"c{i}", "action": "relay", "parameters": {"inputs": [f"${{c{i - 1}}}"]}} for i in range(1, 30)]
    steps.append({"id": "write", "action": "save", "parameters": {"path": "${c29}"}})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    store = SqliteRunStore(tmp_path / "runs.db")
    registry = _registry()

    async def go():
        run = Engine(registry, runner=DurableRunner(LocalRunner(registry))).start(_plan(steps), run_id="deny-1")
        record_run(run, store)
        return await run.result()

    import asyncio

    result = asyncio.run(go())
    assert result.steps["write"].error.rule == "untrusted_argument"
    everyone = {f"fetch in step 'r{i}' (untrusted)" for i in range(10)}
    detail = run_detail(store, "deny-1")
    (panel,) = [st for st in detail.steps if st["step_id"] == "write"]
    assert set(panel["inputs_untrusted"]) == everyone  # the summary named 8; the console follows the inputs for all 10
    store.close()
    assert main(["show", "deny-1"]) == 0
    out = capsys.readouterr().out
    line = next(text for text in out.splitlines() if "inputs derive from untrusted data" in text)
    assert all(label in line for label in everyone)
    assert "more untrusted origins upstream (planexec show lists every one)" in out  # the error's own chain, cut


def _recorded(tmp_path, plan: Plan, run_id: str) -> SqliteRunStore:
    store = SqliteRunStore(tmp_path / f"{run_id}.db")
    registry = _registry()

    async def go():
        run = Engine(registry, runner=DurableRunner(LocalRunner(registry))).start(plan, run_id=run_id)
        record_run(run, store)
        return await run.result()

    import asyncio

    assert asyncio.run(go()).ok
    return store


def test_the_console_page_of_a_deep_run_reads_each_steps_provenance_a_bounded_number_of_times(tmp_path, monkeypatch):
    """The run's page builds every step's panel: each names its nearest origins, not its whole ancestry, so the page is
    linear in the steps (it was quadratic: a 2,000-step run took 21 s to show). Counted, not timed."""
    from planexec.store import RunView
    from planexec.web.views import run_detail

    reads = {"n": 0}
    real = RunView.output_of

    def counted(self, step_id):
        reads["n"] += 1
        return real(self, step_id)

    monkeypatch.setattr(RunView, "output_of", counted)
    per_step = {}
    for depth in (100, 400):
        store = _recorded(tmp_path, _chain(depth, readers=10), f"deep-{depth}")
        reads["n"] = 0
        detail = run_detail(store, f"deep-{depth}")
        per_step[depth] = reads["n"] / len(detail.steps)
        store.close()
    assert per_step[400] <= per_step[100] * 1.1, per_step  # four times the depth, the same reads a step


def test_a_deep_steps_panel_names_its_nearest_origins_and_links_to_every_one(tmp_path):
    from fastapi.testclient import TestClient

    from planexec.web import create_app
    from planexec.web.views import ORIGINS_SHOWN, run_detail

    store = _recorded(tmp_path, _chain(40, readers=10), "deep")
    detail = run_detail(store, "deep")
    store.close()
    (panel,) = [st for st in detail.steps if st["step_id"] == "c39"]
    # the summary the run kept: the nearest untrusted origins, and that more exist upstream
    assert len(panel["untrusted"]) == UNTRUSTED_KEPT and panel["more_untrusted"]
    assert panel["produced"].count(" in step ") <= ORIGINS_SHOWN and panel["produced"].endswith(", and more upstream")
    assert panel["lineage"] == "/runs/deep/steps/c39/lineage"
    (shallow,) = [st for st in detail.steps if st["step_id"] == "r0"]
    assert shallow["lineage"] is None and shallow["untrusted"] == ["fetch in step 'r0' (untrusted)"]  # all of it is shown
    app = create_app(str(tmp_path / "deep.db"), token="t0ken")
    auth = {"Authorization": "Bearer t0ken"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/runs/deep", headers=auth).text
        assert 'href="/runs/deep/steps/c39/lineage"' in page
        lineage = client.get("/runs/deep/steps/c39/lineage", headers=auth)
        unknown = client.get("/runs/deep/steps/nope/lineage", headers=auth)
        no_run = client.get("/runs/ghost/steps/c39/lineage", headers=auth)
    assert lineage.status_code == 200
    every = {f"fetch in step &#39;r{i}&#39; (untrusted)" for i in range(10)}
    assert all(label in lineage.text for label in every)  # the whole chain, upstream of the summary's eight
    assert "relay in step &#39;c0&#39;" in lineage.text  # trusted origins too
    assert unknown.status_code == 404 and "has no step nope" in unknown.text and "Traceback" not in unknown.text
    assert no_run.status_code == 404 and "Traceback" not in no_run.text


def test_show_names_each_outputs_nearest_untrusted_origins_and_one_step_with_every_one(tmp_path, capsys):
    """`planexec show RUN` stays linear in the steps (each output names the nearest origins its provenance kept; it
    printed every ancestor's, 77 MB for a 2,000-step chain); `--step` prints one step with its whole chain."""
    from planexec.cli.main import main

    sizes = {}
    for depth in (100, 400):  # a chain of fetches, each reading its parent's output: every step adds an untrusted origin
        steps = [{"id": "f0", "action": "fetch", "parameters": {"url": "https://start.example"}}]
        steps += [{"id": f"f{i}", "action": "fetch", "parameters": {"url": f"${{f{i - 1}}}"}} for i in range(1, depth)]
        store = _recorded(tmp_path, _plan(steps), f"fetches-{depth}")
        store.close()
        assert main(["show", f"fetches-{depth}", "--store", str(tmp_path / f"fetches-{depth}.db")]) == 0
        sizes[depth] = len(capsys.readouterr().out) / depth
    assert sizes[400] <= sizes[100] * 1.2, sizes  # bytes a step, not growing with the depth
    store = _recorded(tmp_path, _chain(400, readers=10), "show-400")
    store.close()
    assert main(["show", "show-400", "--store", str(tmp_path / "show-400.db")]) == 0
    out = capsys.readouterr().out
    last = [text for text in out.splitlines() if "--step c399 lists every one" in text]
    assert len(last) == 1 and last[0].count(" in step ") == UNTRUSTED_KEPT
    db = str(tmp_path / "show-400.db")
    assert main(["show", "show-400", "--step", "c399", "--store", db]) == 0
    one = capsys.readouterr().out
    assert all(f"fetch in step 'r{i}' (untrusted)" in one for i in range(10)) and "more upstream" not in one
    assert main(["show", "show-400", "--step", "c399", "--json", "--store", db]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step"]["step_id"] == "c399" and len(data["untrusted_origins"]) == 10 and len(data["origins"]) > 10
    assert main(["show", "show-400", "--step", "nope", "--store", db]) == 2
    err = capsys.readouterr().err
    assert "run show-400 has no step 'nope'" in err and "Traceback" not in err
