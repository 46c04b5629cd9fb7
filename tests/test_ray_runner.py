"""The Ray runner (issue 16, parts 1 and 2) on a real two-node Ray cluster on loopback.

A module-scoped fixture starts the cluster with ``ray start``
(`planexec.scale.cluster`: the head at 127.0.0.2, a second node at
127.0.0.3 with a custom resource ``second``), token authentication on (``RAY_AUTH_MODE=token`` and the token's file on
every process, this one included), and stops it at the end by killing
every process of the sessions it started (never by name: other Ray
processes on the machine are not ours). Marked ``ray``: ``pytest -m ray``
runs them alone. The tests that need the cluster are skipped, saying why,
only when Ray is not installed.

What is checked: steps land on both nodes (sync tools as tasks, async tools
on actors); a custom resource places a step; a tool's errors read as they do
locally; a remote timeout ends the step within seconds and kills the worker
process (sync) or cancels the call in its actor (async); a killed worker
fails its step naming the death and its failure action applies; a driver
killed with SIGKILL mid-run leaves no task running, and ``planexec resume``
goes on on the cluster (idempotent steps again, the side effect held for a
decision); ``--runner ray`` and ``planexec.toml`` on the command line, with
clean JSON on stdout; and, without a cluster, the settings and the routing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from argparse import Namespace
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry, Team, scale, tool
from planexec.cli._common import UsageError, runner_settings
from planexec.config import Config, RunnerConfig, load_config
from planexec.errors import RegistryError
from planexec.scale import RayRunner, remote_ref
from planexec.scale import cluster as cluster_module
from planexec.scale.cluster import RayNode, RayUnavailable, TempRayCluster
from planexec.store import SqliteRunStore
from planexec.team.settings import Toolbox
from planexec.testing import ScriptedModel
from planexec.workers.context import ToolContext
from planexec.workers.io import StepCall

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parent.parent

TOOLS = textwrap.dedent(
    '''
    """Tools that say where they ran; some sleep, fail, die or wait to be released."""
    import asyncio
    import json
    import os
    import time

    from ray.util import get_node_ip_address

    from planexec import tool


    def _mark(marks: str, step: str, phase: str) -> None:
        with open(marks, "a") as f:
            f.write(json.dumps({"step": step, "pid": os.getpid(), "phase": phase}) + "\\n")


    @tool(idempotent=True)
    def where(i: int) -> dict:
        """Busy for a moment, then the node's IP and the process."""
        time.sleep(0.5)
        return {"ip": get_node_ip_address(), "pid": os.getpid(), "i": i}


    @tool(idempotent=True)
    async def awhere(i: int) -> dict:
        """The async twin of where."""
        await asyncio.sleep(0.3)
        return {"ip": get_node_ip_address(), "pid": os.getpid(), "i": i}


    @tool(resources={"num_cpus": 0.5, "resources": {"second": 0.1}})
    def pinned() -> str:
        """Only the second node has the resource 'second'."""
        return get_node_ip_address()


    @tool
    def boom(x: int) -> int:
        raise ValueError(f"no good: {x}")


    @tool
    def big(n: int) -> str:
        return "x" * n


    @tool
    def die() -> None:
        """Kill the worker process running it."""
        os.kill(os.getpid(), 9)


    @tool
    def after(note: str = "") -> int:
        return os.getpid()


    @tool
    def slow(name: str, seconds: float, marks: str) -> int:
        _mark(marks, name, "start")
        time.sleep(seconds)
        _mark(marks, name, "end")
        return os.getpid()


    @tool
    async def aslow(name: str, seconds: float, marks: str) -> str:
        _mark(marks, name, "start")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            _mark(marks, name, "cancelled")
            raise
        return name


    def _held(name: str, marks: str, release: str) -> str:
        _mark(marks, name, "start")
        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.1)
        _mark(marks, name, "end")
        return name


    @tool(idempotent=True)
    def work(name: str, marks: str, release: str) -> str:
        """Idempotent: waits until the release file exists."""
        return _held(name, marks, release)


    @tool
    def pay(name: str, marks: str, release: str) -> str:
        """A side effect (not idempotent): waits until the release file exists."""
        return _held(name, marks, release)


    @tool(idempotent=True)
    def quick(name: str, marks: str = "") -> dict:
        if marks:
            _mark(marks, name, "start")
        return {"name": name, "pid": os.getpid(), "ip": get_node_ip_address(), "env": os.environ.get("PLANEXEC_RAY_TEST")}
    '''
)


# --- the cluster --------------------------------------------------------------------------------------


@dataclass
class Cluster:
    address: str
    env: dict[str, str]  # what a process needs to join it: the token's mode and file, planexec on the path
    folder: Path  # a short folder of our own: the tools, the marks, the release file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A two-node Ray cluster on loopback with token authentication, for this module; every process of it stopped after."""
    try:
        temp = TempRayCluster([RayNode("127.0.0.2"), RayNode("127.0.0.3", resources={"second": 1})], pythonpath=str(ROOT / "src"))
    except RayUnavailable as exc:
        pytest.skip(f"the Ray runner's tests need Ray: {exc}")
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    if "ray" in sys.modules and saved["RAY_AUTH_MODE"] != "token":
        temp.stop()
        pytest.fail("Ray was imported in this process before the cluster's token was set: it would never authenticate")
    # this process drives runs too: it needs the token like any other, set before Ray is imported (Ray reads it then)
    os.environ.update({k: temp.env[k] for k in saved})
    import ray

    try:
        with temp:
            (temp.folder / "raytools.py").write_text(TOOLS)
            try:
                yield Cluster(address=temp.address, env=temp.env, folder=temp.folder)
            finally:
                if ray.is_initialized():
                    ray.shutdown()  # this process's driver first, then the cluster's processes
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def registry(cluster: Cluster) -> Registry:
    """The built-ins and the test tools, loaded from their file (a shared path: the nodes share this machine's files)."""
    return Registry.default(str(cluster.folder / "raytools.py"))


@pytest.fixture(scope="module")
def runner(cluster: Cluster, registry: Registry) -> RayRunner:
    """A Ray runner on the cluster, connected (this process becomes a driver)."""
    r = RayRunner(registry, address=cluster.address)
    r.connect()
    return r


def _plan(steps: list[dict]) -> Plan:
    return Plan.model_validate({"plan_id": "ray", "goal": "run on the cluster", "steps": steps})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _wait_dead(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _marks(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- steps on the cluster ----------------------------------------------------------------------------


def test_steps_land_on_both_nodes_sync_as_tasks_async_on_actors(runner: RayRunner, registry: Registry):
    steps = [{"id": f"s{i}", "action": "where", "parameters": {"i": i}} for i in range(4)]
    steps += [{"id": f"a{i}", "action": "awhere", "parameters": {"i": i}} for i in range(4)]
    steps += [{"id": "pin", "action": "pinned"}, {"id": "here", "action": "echo", "parameters": {"value": "driver"}}]
    result = Engine(registry, runner=runner).run_sync(_plan(steps))
    assert result.status.value == "succeeded", {s: r.error for s, r in result.steps.items() if r.error}
    outputs = {sid: rec.output.value for sid, rec in result.steps.items()}
    sync = [outputs[f"s{i}"] for i in range(4)]
    asynchronous = [outputs[f"a{i}"] for i in range(4)]
    assert {o["ip"] for o in sync} == {"127.0.0.2", "127.0.0.3"}  # spread: Ray's default would pack the head
    assert {o["ip"] for o in asynchronous} == {"127.0.0.2", "127.0.0.3"}  # an async actor on each node
    assert all(o["pid"] != os.getpid() for o in sync + asynchronous)  # none ran in the driver
    assert outputs["pin"] == "127.0.0.3"  # the tool's custom resource exists only there
    assert outputs["here"] == "driver"  # planexec's own tools stay on the driver
    assert runner.remote(_call(registry, "echo")) is None and runner.remote(_call(registry, "where")) is not None


def test_a_steps_own_resources_place_it(runner: RayRunner, registry: Registry):
    """`Step.resources` over the tool's: a plain tool's step asking for 'second' runs on the node that has it, every time."""
    steps = [{"id": f"p{i}", "action": "where", "parameters": {"i": i}, "resources": {"resources": {"second": 0.1}}} for i in range(4)]
    plan = _plan(steps)
    assert plan.steps[0].resources is not None and plan.steps[0].resources.resources == {"second": 0.1}
    result = Engine(registry, runner=runner).run_sync(plan)
    assert result.status.value == "succeeded", {s: r.error for s, r in result.steps.items() if r.error}
    assert {rec.output.value["ip"] for rec in result.steps.values()} == {"127.0.0.3"}


def test_a_step_without_resources_keeps_its_plans_hash_and_json():
    """Plans written before `Step.resources` keep their content hash: the field is left out of the JSON unless given."""
    plain = _plan([{"id": "x", "action": "where", "parameters": {"i": 1}}])
    assert "resources" not in plain.model_dump(mode="json")["steps"][0]
    placed = _plan([{"id": "x", "action": "where", "parameters": {"i": 1}, "resources": {"num_cpus": 2}}])
    assert placed.content_hash != plain.content_hash and placed.model_dump(mode="json")["steps"][0]["resources"]["num_cpus"] == 2
    with pytest.raises(ValueError, match="cpus"):
        _plan([{"id": "x", "action": "where", "resources": {"cpus": 2}}])


def _call(registry: Registry, action: str) -> StepCall:
    step = _plan([{"id": "x", "action": action}]).steps[0]
    return StepCall(run_id="r", plan_id="p", step=step, worker="tool")


def test_a_tools_errors_read_as_they_do_locally(runner: RayRunner, registry: Registry):
    steps = [
        {"id": "boom", "action": "boom", "parameters": {"x": 3}, "failure_action": "skip"},
        {"id": "big", "action": "big", "parameters": {"n": 5000}, "failure_action": "skip"},
        {"id": "fine", "action": "big", "parameters": {"n": 10}},
    ]
    result = Engine(registry, runner=runner, max_output_bytes=1000).run_sync(_plan(steps))
    boom, big, fine = (result.steps[s] for s in ("boom", "big", "fine"))
    assert (boom.error.rule, boom.error.type, boom.error.message) == ("exception", "ValueError", "no good: 3")
    assert big.error.rule == "tool_output" and big.error.type == "ToolOutputError"
    assert "larger than the limit" in big.error.message and "1,000 bytes" in big.error.message  # bounded on the worker
    assert fine.output.value == "x" * 10


def test_a_remote_timeout_ends_the_step_within_seconds_and_kills_the_worker(runner: RayRunner, registry: Registry, tmp_path: Path):
    marks = str(tmp_path / "marks.jsonl")
    plan = _plan(
        [
            {"id": "sync", "action": "slow", "parameters": {"name": "sync", "seconds": 60, "marks": marks}, "timeout": 4,
             "failure_action": "skip"},
            {"id": "async", "action": "aslow", "parameters": {"name": "async", "seconds": 60, "marks": marks}, "timeout": 4,
             "failure_action": "skip"},
        ]
    )  # fmt: skip
    t0 = time.monotonic()
    result = Engine(registry, runner=runner, cancel_grace=2.0).run_sync(plan)
    wall = time.monotonic() - t0
    assert wall < 10, wall
    for sid in ("sync", "async"):
        rec = result.steps[sid]
        assert rec.state.value == "failed" and rec.error.rule == "timeout", rec.error
    seen = _marks(Path(marks))
    started = {m["step"]: m["pid"] for m in seen if m["phase"] == "start"}
    assert set(started) == {"sync", "async"}
    assert _wait_dead([started["sync"]], 10) == [], "the timed-out task's worker process is still alive"
    assert any(m["step"] == "async" and m["phase"] == "cancelled" for m in seen)  # the cancel reached the coroutine
    assert not any(m["phase"] == "end" for m in seen)


def test_a_killed_worker_fails_its_step_and_its_failure_action_applies(runner: RayRunner, registry: Registry):
    plan = _plan(
        [
            {"id": "die", "action": "die", "failure_action": "skip"},
            {"id": "next", "action": "after", "depends_on": ["die"], "accepts_failed_inputs": True},
        ]
    )
    result = Engine(registry, runner=runner).run_sync(plan)
    died = result.steps["die"]
    assert died.state.value == "failed" and died.error.rule == "worker"
    assert died.error.message.startswith("step 'die': the Ray worker running it died (WorkerCrashedError")
    assert result.steps["next"].state.value == "succeeded"  # skip: the run went on
    assert result.status.value == "partial"


def test_a_team_runs_its_plans_tool_steps_where_its_runner_says(cluster: Cluster, runner: RayRunner):
    plan = {"steps": [{"id": "s1", "worker": "tool", "action": "quick", "instruction": "where", "parameters": {"name": "s1"}}]}
    team = Team(
        ScriptedModel([json.dumps(plan)], name="script:planner"),
        mode="plan",
        runner=RunnerConfig(kind="ray", address=cluster.address),
        toolbox=Toolbox(modules=[str(cluster.folder / "raytools.py")]),
    )
    result = team.run_sync("where does it run?")
    assert result.status.value == "succeeded"
    assert result.answer["pid"] != os.getpid() and result.answer["ip"] in ("127.0.0.2", "127.0.0.3")
    assert team.setup()["runner"] == {"kind": "ray", "address": cluster.address, "namespace": None, "spread": True}
    assert Team(ScriptedModel([], name="script:p")).engine().runner.__class__.__name__ == "LocalRunner"  # the default


# --- the command line: --runner ray, planexec.toml, a driver killed then resumed ------------------------------------------------


def _cli(args: list[str], cluster: Cluster, cwd: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "planexec", *args],
        cwd=cwd,
        env={**cluster.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def test_a_killed_driver_leaves_nothing_running_and_resume_goes_on_on_the_cluster(cluster: Cluster, tmp_path: Path):
    marks, release, db = tmp_path / "marks.jsonl", tmp_path / "release", tmp_path / "runs.db"
    files = {"marks": str(marks), "release": str(release)}
    # planexec.toml says nothing of where steps run, only what the workers' environment holds: the flags say where
    (tmp_path / "planexec.toml").write_text('[planexec.runner]\nruntime_env = {env_vars = {PLANEXEC_RAY_TEST = "from-toml"}}\n')
    plan = {
        "plan_id": "crash",
        "goal": "survive the driver's death",
        "steps": [
            {"id": "first", "action": "quick", "parameters": {"name": "first", "marks": str(marks)}},
            {"id": "work", "action": "work", "parameters": {"name": "work", **files}, "depends_on": ["first"]},
            {"id": "pay", "action": "pay", "parameters": {"name": "pay", **files}, "depends_on": ["first"]},
            {"id": "last", "action": "quick", "parameters": {"name": "last", "marks": str(marks)}, "depends_on": ["work", "pay"]},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {"PLANEXEC_STORE": str(db)}
    tools = str(cluster.folder / "raytools.py")
    driver = _cli(
        ["run", "--plan", "plan.json", "--tools", tools, "--runner", "ray", "--ray-address", cluster.address, "--yes", "--json",
         "--run-id", "crash-1"],
        cluster, tmp_path, **env,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while {"work", "pay"} - {m["step"] for m in _marks(marks) if m["phase"] == "start"}:
        assert driver.poll() is None, driver.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline, "work and pay never started on the cluster"
        time.sleep(0.1)
    running = [m["pid"] for m in _marks(marks) if m["step"] in ("work", "pay")]
    assert driver.pid not in running  # they run on Ray workers, not in the driver
    driver.send_signal(signal.SIGKILL)
    driver.communicate()
    # the driver's job ends with it: Ray stops its tasks, so nothing of the dead run goes on behind resume's back
    assert _wait_dead(running, 15) == [], "a task of the killed driver is still running"
    release.write_text("go")
    elsewhere = subprocess.run(  # a cluster out of reach: said before anything changes, with the way out
        [sys.executable, "-m", "planexec", "resume", "crash-1", "--ray-address", f"127.0.0.1:{_free_port()}"],
        cwd=tmp_path, env={**cluster.env, **env}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert elsewhere.returncode == 2 and "--runner local resumes the run in this process" in elsewhere.stderr.decode()

    resumed = _cli(["resume", "crash-1", "--yes", "--json"], cluster, tmp_path, **env)  # the recorded runner: the same cluster
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 1, err.decode()[-3000:]
    result = json.loads(out)  # stdout is the JSON alone, whatever Ray printed
    assert result["status"] == "needs_decision"
    states = {sid: rec["state"] for sid, rec in result["steps"].items()}
    assert states["work"] == "succeeded"  # idempotent: run again
    assert states["pay"] != "succeeded"  # a side effect cut off: held for a person
    store = SqliteRunStore(db)
    try:
        held = [e for e in store.events("crash-1") if e.type == "run_resumed"][-1].held
    finally:
        store.close()
    assert held == ["pay"]
    starts = [m for m in _marks(marks) if m["step"] == "work" and m["phase"] == "start"]
    assert len(starts) == 2 and starts[1]["pid"] not in (driver.pid, resumed.pid)  # again, on a Ray worker

    decided = subprocess.run(
        [sys.executable, "-m", "planexec", "resolve", "crash-1", "pay", "--retry"],
        cwd=tmp_path,
        env={**cluster.env, **env},
        capture_output=True,
    )
    assert decided.returncode == 0, decided.stderr.decode()[-3000:]
    final = _cli(["resume", "crash-1", "--yes", "--json"], cluster, tmp_path, **env)
    out, err = final.communicate(timeout=120)
    assert final.returncode == 0, err.decode()[-3000:]
    done = json.loads(out)
    assert done["status"] == "succeeded"
    last = done["steps"]["last"]["output"]["value"]
    assert last["pid"] != final.pid and last["env"] == "from-toml"  # on a Ray worker, in the runtime environment of planexec.toml
    assert [m["step"] for m in _marks(marks) if m["phase"] == "start"].count("pay") == 2  # once cut off, once on the person's retry


def test_planexec_toml_runner_and_clean_json_when_a_worker_dies(cluster: Cluster, tmp_path: Path):
    (tmp_path / "planexec.toml").write_text(
        f'[planexec]\ntools = ["{cluster.folder / "raytools.py"}"]\n\n[planexec.runner]\nkind = "ray"\naddress = "{cluster.address}"\n'
    )
    plan = {
        "plan_id": "toml",
        "goal": "run where planexec.toml says",
        "steps": [
            {"id": "die", "action": "die", "failure_action": "skip"},
            {"id": "q", "action": "quick", "parameters": {"name": "q"}, "depends_on": ["die"], "accepts_failed_inputs": True},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    proc = _cli(["run", "--plan", "plan.json", "--yes", "--json"], cluster, tmp_path, PLANEXEC_STORE=str(tmp_path / "runs.db"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err.decode()[-3000:]  # partial: one step failed and was skipped
    result = json.loads(out)  # Ray's note about the dead worker went to stderr, not into the JSON
    assert "the Ray worker running it died" in result["steps"]["die"]["error"]["message"]
    assert result["steps"]["q"]["output"]["value"]["pid"] != proc.pid
    assert "Traceback" not in err.decode()


def test_a_cluster_that_does_not_answer_is_a_usage_error_before_anything_runs(tmp_path: Path):
    if importlib.util.find_spec("ray") is None:  # not imported here: the cluster's fixture must import it after the token is set
        pytest.skip("the Ray runner's tests need Ray: pip install 'planexec[ray]'")
    (tmp_path / "plan.json").write_text(json.dumps({"plan_id": "p", "goal": "g", "steps": [{"id": "a", "action": "noop"}]}))
    closed = _free_port()  # nothing listens there
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "--plan", "plan.json", "--yes", "--ray-address", f"127.0.0.1:{closed}"],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert f"cannot connect to the Ray cluster at 127.0.0.1:{closed}: nothing answers" in err
    assert "Traceback" not in err and time.monotonic() - t0 < 30


# --- settings and routing (no cluster) -------------------------------------------------------------


def test_runner_settings_in_planexec_toml(tmp_path: Path):
    (tmp_path / "planexec.toml").write_text(
        textwrap.dedent(
            """
            [planexec.runner]
            kind = "ray"
            address = "ray-head:6379"
            spread = false
            runtime_env = {working_dir = ".", py_modules = ["lib", "s3://bucket/mod.zip"], env_vars = {A = "1"}}

            [planexec.runner.resources]
            crunch = {num_cpus = 2, memory = 1073741824, resources = {gpu_box = 1}}
            """
        )
    )
    runner = load_config(tmp_path).runner
    assert (runner.kind, runner.address, runner.spread) == ("ray", "ray-head:6379", False)
    assert runner.runtime_env == {
        "working_dir": str(tmp_path / "."),
        "py_modules": [str(tmp_path / "lib"), "s3://bucket/mod.zip"],
        "env_vars": {"A": "1"},
    }
    assert runner.resources["crunch"].num_cpus == 2 and runner.resources["crunch"].resources == {"gpu_box": 1}
    assert runner.recorded() == {"kind": "ray", "address": "ray-head:6379", "namespace": None, "spread": False}  # no runtime_env: secrets
    assert load_config(tmp_path / "nothing-here").runner.kind is None  # the local runner by default


def test_the_command_line_wins_over_planexec_toml_which_wins_over_the_recorded_run():
    toml = Config(runner=RunnerConfig(kind="ray", address="a:1"))
    recorded = {"runner": {"kind": "ray", "address": "b:2", "spread": True}}  # the run's RunStarted.setup
    nothing = Namespace(runner=None, ray_address=None)
    assert runner_settings(nothing, toml, recorded).address == "a:1"
    assert runner_settings(nothing, Config(), recorded).address == "b:2"
    assert runner_settings(Namespace(runner=None, ray_address="c:3"), toml, recorded).address == "c:3"
    assert runner_settings(Namespace(runner="local", ray_address=None), toml, recorded).kind == "local"
    assert runner_settings(nothing, Config(), None).kind is None
    with pytest.raises(UsageError, match="--ray-address is for --runner ray"):
        runner_settings(Namespace(runner="local", ray_address="c:3"), Config())


def _crunch(n: int) -> int:
    return n


def _with_context(n: int, ctx: ToolContext) -> int:
    return n


def test_which_tools_go_to_the_cluster():
    def local_closure(n: int) -> int:
        return n

    ref = remote_ref(tool(_crunch))
    assert ref is not None and (ref.module, ref.qualname, ref.file) == (__name__, "_crunch", __file__)
    assert remote_ref(tool(local_closure)) is None  # no worker finds a nested function by name
    assert remote_ref(tool(lambda n: n, name="lam")) is None
    assert remote_ref(tool(_with_context)) is None  # its ToolContext's dependencies live in the driver
    assert remote_ref(Registry.default().tools["echo"]) is None  # planexec's own: on the driver
    with pytest.raises(RegistryError, match="resources takes"):
        tool(_crunch, resources={"cpus": 2})
    assert tool(_crunch, resources={"num_cpus": 2}).resources == {"num_cpus": 2}


def test_the_scale_package_exports_what_its_docstring_names_and_imports_no_ray():
    assert scale.__all__ == ["INSTALL_HINT", "RayRunner", "Runner", "remote_ref", "runner_for"]
    assert cluster_module.__all__ == ["RayNode", "RayUnavailable", "TempRayCluster"]
    code = "import sys, planexec.scale, planexec.scale.cluster, planexec.cli.main; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.stdout.strip() == "False", out.stderr  # Ray is imported when a runner connects, not before
