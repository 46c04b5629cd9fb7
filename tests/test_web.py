"""The web console, end to end: a real ``planexec serve`` on a free loopback port over a real SQLite store, runs started by
``planexec run`` in other processes, and a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
Selenium) that approves plans and steps, edits a plan and follows runs to their end.

The HTTP tests (the token, CSRF, Origin, the serve command's refusals) need no browser. The browser tests are marked
``browser`` and skipped, saying why, only when Chromium or its driver is absent. Each page's screenshot is saved under
tests/artifacts/web/ (ignored by git); the path is printed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from planexec.store import RunNotFoundError, StoreError, open_store

TOKEN = "test-token-0123456789abcdef"
USER = "alice"
WAIT = 60.0

TOOLS = textwrap.dedent(
    '''
    """Tools for the console tests: `ship` is a side effect counted in $SHIP_LOG; `build` takes a moment, so a page sees steps run."""
    import os
    import time

    from planexec import tool


    @tool(idempotent=True)
    def build(name: str) -> str:
        """Idempotent work that takes a moment."""
        time.sleep(0.4)
        return f"built {name}"


    @tool
    def ship(name: str) -> str:
        """A side effect: one line in $SHIP_LOG each time it runs."""
        with open(os.environ["SHIP_LOG"], "a") as f:
            f.write(f"{os.getpid()} {name}\\n")
        return f"shipped {name}"
    '''
)


def plan(*, gated_step: bool) -> dict:
    """compile and docs in parallel, then ship (after compile), then announce; `gated_step` makes ship require approval."""
    ship = {
        "id": "ship",
        "action": "ship",
        "parameters": {"name": "app"},
        "depends_on": ["compile"],
        "instruction": "ship the app to production",
    }
    if gated_step:
        ship["requires_approval"] = True
    return {
        "plan_id": "release",
        "goal": "ship the app",
        "steps": [
            {"id": "compile", "action": "build", "parameters": {"name": "app"}, "instruction": "compile the app"},
            {"id": "docs", "action": "build", "parameters": {"name": "docs"}},
            ship,
            {"id": "announce", "action": "build", "parameters": {"name": "news"}, "depends_on": ["ship"]},
        ],
    }


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with tools.py, plan.json (ship gated), open.json (nothing gated), policies.yaml (ship needs a person) and a store path."""
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(plan(gated_step=True)))
    (tmp_path / "open.json").write_text(json.dumps(plan(gated_step=False)))
    (tmp_path / "policies.yaml").write_text('needs_person: ["ship"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    monkeypatch.setenv("SHIP_LOG", str(tmp_path / "ship.log"))
    monkeypatch.delenv("PLANEXEC_WEB_TOKEN", raising=False)
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def request(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of one HTTP request; redirects are not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with opener.open(req, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def server(project):
    """A real ``planexec serve`` on a free loopback port over the project's SQLite store; its base URL. Stopped afterwards."""
    port = free_port()
    log = (project / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec", "serve", "--port", str(port), "--store", str(project / "runs.db"), "--token", TOKEN, "--user", USER],
        cwd=project, env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"planexec serve exited ({proc.returncode}):\n{(project / 'serve.log').read_text()}")
        try:
            if request(base + "/", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("planexec serve did not answer")
        time.sleep(0.1)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def planexec(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """``python -m planexec ARGS`` as another process, stdin not a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "planexec", *args], cwd=cwd, env=dict(os.environ),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = WAIT) -> tuple[str, str]:
    """Its output once it exits; kill it and fail when it does not."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not exit within {timeout:g}s:\n{out[-2000:]}\n{err[-2000:]}")


def wait_until(what: str, check, proc: subprocess.Popen[str] | None = None, timeout: float = WAIT) -> None:
    """Poll `check` until true; fail naming `what` after `timeout` seconds, or when `proc` ends first."""
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}:\n{out[-2000:]}\n{err[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def pending(project: Path, run_id: str, *, step_id: str | None = None) -> list:
    """The run's pending approvals (of the plan when `step_id` is None, else of that step); [] before the run is stored."""
    try:
        store = open_store(str(project / "runs.db"), create=False)
    except StoreError:  # not there yet, or being created by the run
        return []
    try:
        return [a for a in store.approvals(run_id, pending_only=True) if a.step_id == step_id]
    except RunNotFoundError:
        return []
    finally:
        store.close()


def approvals(project: Path, run_id: str) -> list:
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return store.approvals(run_id)
    finally:
        store.close()


def start_waiting_on_plan(project: Path, run_id: str, plan_file: str = "open.json") -> subprocess.Popen[str]:
    """``planexec run --plan`` whose plan a policy escalates: with no one at the terminal it waits for approval from another process."""
    proc = planexec(
        "run", "--plan", plan_file, "--tools", "tools.py", "--policies", "policies.yaml", "--run-id", run_id, "--json", cwd=project
    )
    wait_until(f"run {run_id} waiting for plan approval", lambda: bool(pending(project, run_id)), proc)
    return proc


# --- the token, CSRF and the serve command: plain HTTP ----------------------------------------


def test_without_the_token_every_request_gets_401_and_changes_nothing(project, server):
    run = start_waiting_on_plan(project, "r1")
    [asked] = pending(project, "r1")
    for path in ("/", "/runs/r1", "/approvals", "/static/app.js", "/runs/r1/stream", "/runs/r1/edit"):
        assert request(server + path)[0] == 401, path
    assert request(server + "/?token=not-the-token")[0] == 401
    assert request(server + "/", headers={"Authorization": "Bearer not-the-token"})[0] == 401
    status, _ = request(server + f"/approvals/{asked.approval_id}", data=b"decision=approve&reason=sneaky")
    assert status == 401
    assert [a.approval_id for a in pending(project, "r1")] == [asked.approval_id]  # still pending: nothing changed
    run.kill()
    run.communicate()


def test_the_first_visit_trades_the_token_for_an_httponly_strict_cookie(project, server):
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        urllib.request.build_opener(NoRedirect).open(f"{server}/approvals?token={TOKEN}", timeout=10)
        pytest.fail("expected a redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 303
        assert exc.headers["location"] == "/approvals"  # the token leaves the address
        cookie = exc.headers["set-cookie"]
    assert f"planexec_token={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert request(server + "/approvals", headers={"Cookie": f"planexec_token={TOKEN}"})[0] == 200


def test_a_post_without_the_csrf_token_or_from_another_origin_is_refused(project, server):
    run = start_waiting_on_plan(project, "r1")
    [asked] = pending(project, "r1")
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded"}
    url = f"{server}/approvals/{asked.approval_id}"
    status, body = request(url, data=b"decision=approve", headers=auth)
    assert status == 403 and "CSRF" in body
    status, _ = request(url, data=b"decision=approve&csrf=wrong", headers=auth)
    assert status == 403
    page = request(server + "/approvals", headers=auth)[1]
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    status, body = request(url, data=f"decision=approve&csrf={csrf}".encode(), headers={**auth, "Origin": "http://evil.example"})
    assert status == 403 and "another origin" in body
    assert [a.approval_id for a in pending(project, "r1")] == [asked.approval_id]  # nothing changed
    status, _ = request(url, data=f"decision=deny&reason=not+today&csrf={csrf}".encode(), headers={**auth, "Origin": server})
    assert status == 303  # with the CSRF token and this origin the same request goes through
    [decided] = [a for a in approvals(project, "r1") if a.approval_id == asked.approval_id]
    assert (decided.state.value, decided.by, decided.reason) == ("denied", USER, "not today")
    out, _ = finish(run)
    assert json.loads(out)["status"] == "failed"  # plan_rejected: nothing of it ran


def test_a_foreign_host_name_is_refused_on_a_loopback_bind(project, server):
    status, _ = request(server + "/", headers={"Authorization": f"Bearer {TOKEN}", "Host": "attacker.example"})
    assert status == 403


def test_serve_refuses_a_remote_bind_without_the_flag_and_a_chosen_token(project, capsys):
    from planexec.cli.main import main

    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["serve", "--host", "0.0.0.0", "--allow-remote"]) == 2
    assert "token" in capsys.readouterr().err
    assert main(["serve", "--token", "short"]) == 2


def test_serve_prints_an_address_with_a_new_token_when_none_is_given(project):
    port = free_port()
    proc = planexec("serve", "--port", str(port), cwd=project)
    try:
        line = ""
        deadline = time.monotonic() + WAIT
        while "?token=" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        token = line.strip().split("?token=")[1]
        assert len(token) >= 30
        wait_until("the console answering", lambda: _answers(f"http://127.0.0.1:{port}/", token), proc)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _serve_lines(proc: subprocess.Popen[str]) -> tuple[str, int]:
    """The first lines ``planexec serve`` prints (up to the address to open) and the port it listens on."""
    text = ""
    deadline = time.monotonic() + WAIT
    while "?token=" not in text and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        text += line
    return text, int(text.split("planexec console on http://127.0.0.1:")[1].split("/")[0])


def test_serve_port_0_picks_a_free_port_and_the_token_comes_from_the_variable_planexec_toml_names(project, monkeypatch):
    (project / "planexec.toml").write_text('[planexec.serve]\ntoken_env = "MY_CONSOLE_TOKEN"\nuser = "carol"\n')
    monkeypatch.setenv("MY_CONSOLE_TOKEN", "from-the-environment-0123456789")
    proc = planexec("serve", "--port", "0", cwd=project)
    try:
        text, port = _serve_lines(proc)
        token = "from-the-environment-0123456789"
        assert port > 0 and token not in text, text  # a token the person chose is not printed: where it comes from is
        assert f"open: http://127.0.0.1:{port}/?token=TOKEN, with the token from $MY_CONSOLE_TOKEN (planexec.toml)" in text
        wait_until("the console answering on the printed port", lambda: _answers(f"http://127.0.0.1:{port}/", token), proc)
        assert (
            "signed in as <strong>carol</strong>" in request(f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {token}"})[1]
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_serve_refuses_a_token_variable_that_is_not_set(project, monkeypatch, capsys):
    from planexec.cli.main import main

    (project / "planexec.toml").write_text('[planexec.serve]\ntoken_env = "MY_CONSOLE_TOKEN"\n')
    monkeypatch.delenv("MY_CONSOLE_TOKEN", raising=False)
    assert main(["serve", "--port", "0"]) == 2
    assert "$MY_CONSOLE_TOKEN" in capsys.readouterr().err


def test_a_token_written_in_planexec_toml_is_used_with_a_warning_when_others_can_read_the_file(project):
    config = project / "planexec.toml"
    config.write_text('[planexec.serve]\ntoken = "written-in-the-file-0123456789"\n')
    for mode, warned in ((0o644, True), (0o600, False)):
        config.chmod(mode)
        proc = planexec("serve", "--port", "0", cwd=project)
        try:
            text, port = _serve_lines(proc)
            token = "written-in-the-file-0123456789"
            assert token not in text and "with the token from planexec.toml" in text
            url = f"http://127.0.0.1:{port}/"
            wait_until("the console answering", lambda url=url, token=token: _answers(url, token), proc)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
        assert ("other users can read it: chmod 600" in err) is warned, (oct(mode), err)


def _answers(url: str, token: str) -> bool:
    try:
        return request(url, headers={"Authorization": f"Bearer {token}"})[0] == 200
    except OSError:
        return False


def _record(store_path: Path, run_id: str, parent: tuple[str, str] | None = None) -> None:
    """Run the open plan's first step in memory as run `run_id` and store it (as a sub-run of `parent`, when given)."""
    import asyncio

    from planexec import Engine, Plan, Registry

    registry = Registry()

    @registry.tool(idempotent=True)
    async def build(name: str) -> str:
        """Build it."""
        return f"built {name}"

    steps = [dict(plan(gated_step=False)["steps"][0])]
    the_plan = Plan.model_validate({**plan(gated_step=False), "steps": steps})
    events: list = []

    async def go() -> None:
        run = Engine(registry).start(the_plan, run_id=run_id)
        events.extend([ev async for ev in run.events()])
        assert (await run.result()).ok

    asyncio.run(go())
    store = open_store(str(store_path))
    try:
        store.save_plan(run_id, the_plan)
        store.append(events, parent=parent)
    finally:
        store.close()


def test_a_sub_run_opens_at_its_own_address_and_never_as_a_page_of_its_parent(project, server):
    """A sub-run's id holds a "/" (``R/step``): its links encode it, the server routes on the segment as sent, so
    ``/runs/r1%2Fedit`` is the sub-run of step ``edit`` and ``/runs/r1/edit`` stays r1's plan editor."""
    db = project / "runs.db"
    _record(db, "r1")
    _record(db, "r1/edit", parent=("r1", "edit"))
    _record(db, "r1/compile", parent=("r1", "compile"))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    code, runs = request(server + "/", headers=auth)
    assert code == 200
    assert 'href="/runs/r1%2Fedit"' in runs and 'href="/runs/r1%2Fcompile"' in runs and 'href="/runs/r1"' in runs
    code, sub = request(server + "/runs/r1%2Fcompile", headers=auth)
    assert code == 200, sub
    assert "<title>Run r1/compile" in sub and 'href="/runs/r1">r1</a> (step compile)' in sub  # and the way back to its parent
    assert 'data-panels="/runs/r1%2Fcompile/panels"' in sub and 'data-stream="/runs/r1%2Fcompile/stream"' in sub
    code, panels = request(server + "/runs/r1%2Fcompile/panels", headers=auth)
    assert code == 200 and "built app" in panels
    code, lineage = request(server + "/runs/r1%2Fcompile/steps/compile/lineage", headers=auth)
    assert code == 200 and "r1/compile" in lineage
    code, named_edit = request(server + "/runs/r1%2Fedit", headers=auth)
    assert code == 200 and "<title>Run r1/edit" in named_edit
    code, editor = request(server + "/runs/r1/edit", headers=auth)  # r1's editor: nothing of r1 waits, so nothing to edit
    assert code == 404 and "nothing to edit" in editor
    # typed with its "/" as it is: sent on to the address the links use; an unknown one is the console's own 404
    code, _ = request(server + "/runs/r1/compile", headers=auth)
    assert code == 307
    code, gone = request(server + "/runs/r1/nothing-here", headers=auth)
    assert code == 404 and "r1/nothing-here" in gone and "Traceback" not in gone


@pytest.fixture
def console(tmp_path):
    """The console's app in process (FastAPI's TestClient, redirects not followed) over a store with runs whose ids
    need care in an address: r1 and its sub-run r1/compile, "a b" and "a b/compile", and a run named "table"."""
    from fastapi.testclient import TestClient

    from planexec.web import create_app

    db = tmp_path / "runs.db"
    for rid, parent in (
        ("r1", None),
        ("r1/compile", ("r1", "compile")),
        ("a b", None),
        ("a b/compile", ("a b", "compile")),
        ("table", None),
    ):
        _record(db, rid, parent=parent)
    with TestClient(create_app(str(db), token=TOKEN, worker=False), base_url="http://127.0.0.1", follow_redirects=False) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        yield client


def test_an_address_typed_by_hand_goes_on_to_the_page_it_means_with_its_query(console):
    # a sub-run typed with its "/", the parent's id encoded or not: on to the address the links use, the notice kept
    for typed, meant in (("/runs/r1/compile?done=hi", "/runs/r1%2Fcompile?done=hi"), ("/runs/a%20b/compile", "/runs/a%20b%2Fcompile")):
        answer = console.get(typed)
        assert (answer.status_code, answer.headers["location"]) == (307, meant), typed
    # a trailing "/" is dropped, on a run's page, a sub-run's or any view of a run, as before the sub-runs had addresses
    for typed in ("/runs/r1%2Fcompile/", "/runs/r1/panels/", "/runs/r1/review/", "/runs/r1/steps/compile/lineage/"):
        answer = console.get(typed)
        assert (answer.status_code, answer.headers["location"]) == (307, typed[:-1]), typed
    assert console.get("/runs/r1/steps/compile/lineage").status_code == 200


def test_a_mistyped_address_is_a_404_that_says_so_and_does_not_reload_itself(console):
    for typed in ("/runs/r1/panelz", "/runs/nobody/compile", "/runs/"):
        answer = console.get(typed)
        assert answer.status_code == 404 and "no page at this address" in answer.text, typed
        assert "data-retry" not in answer.text and "Traceback" not in answer.text
    from planexec.web import csrf_token

    answer = console.post("/runs/r1/compile/edit", data={"csrf": csrf_token(TOKEN)})
    assert answer.status_code == 404 and "no page at this address" in answer.text  # not a 405 of a route it is not


def test_a_run_named_table_opens_and_the_runs_list_refreshes_from_its_own_address(console):
    page = console.get("/runs/table")
    assert page.status_code == 200 and "<title>Run table" in page.text
    runs = console.get("/")
    assert 'data-live="/fragments/runs?' in runs.text and 'href="/runs/table"' in runs.text
    assert 'href="/runs/a%20b%2Fcompile"' in console.get("/fragments/runs").text


def test_the_console_checks_its_store_once_a_thread_not_on_every_request_and_follows_a_replaced_file(console, tmp_path, monkeypatch):
    """Opening checks the file (SQLite's quick check: ~14 ms for 13 MB); the runs list asks every two seconds."""
    import shutil

    from planexec.store import sqlite

    checks = []
    real = sqlite.open_check
    monkeypatch.setattr(sqlite, "open_check", lambda *a, **k: (checks.append(1), real(*a, **k))[1])
    for _ in range(20):
        assert console.get("/fragments/runs").status_code == 200
    assert 1 <= len(checks) <= 3, len(checks)  # one a thread the requests were served on, not one a request
    # another file at the same path (a restore, a repair): read from the next request on, checked again
    other = tmp_path / "other.db"
    _record(other, "restored")
    before = len(checks)
    shutil.copy(other, tmp_path / "runs.db.new")
    os.replace(tmp_path / "runs.db.new", tmp_path / "runs.db")
    for f in (tmp_path / "runs.db-wal", tmp_path / "runs.db-shm"):
        f.unlink(missing_ok=True)
    runs = console.get("/fragments/runs").text
    assert 'href="/runs/restored"' in runs and 'href="/runs/r1"' not in runs and len(checks) > before
    # no store at all: an empty list, as before the first run; a new one is found
    (tmp_path / "runs.db").unlink()
    answer = console.get("/")
    assert answer.status_code == 200 and 'href="/runs/restored"' not in answer.text
    _record(tmp_path / "runs.db", "again")
    assert 'href="/runs/again"' in console.get("/fragments/runs").text


def test_a_store_that_failed_a_request_is_opened_again_for_the_next(console, monkeypatch):
    from planexec.errors import StoreError
    from planexec.store import SqliteRunStore

    real = SqliteRunStore.runs
    failed = []

    def once(self, *args, **kwargs):
        if not failed:
            failed.append(self)
            raise StoreError("cannot read the run store: disk I/O error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SqliteRunStore, "runs", once)
    answer = console.get("/")
    assert answer.status_code == 503 and "disk I/O error" in answer.text and "Traceback" not in answer.text
    assert 'href="/runs/r1"' in console.get("/").text  # a new store: the failed one was closed, not kept
    assert failed[0].closed


def _fds_on(name: str) -> int:
    """How many of this process's descriptors are open on a file whose path holds `name`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += name in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return count


def test_the_console_keeps_a_few_stores_open_however_many_threads_served_requests(tmp_path):
    """The request threads come and go (anyio ends one idle for 10 s): the open files follow the requests in flight."""
    from concurrent.futures import ThreadPoolExecutor

    from planexec.web.stores import IDLE_KEPT, StorePool

    db = tmp_path / "runs.db"
    _record(db, "r1")
    pool = StorePool(str(db))
    before = _fds_on(str(db))

    def request(_: object) -> int:
        with pool.use() as store:
            assert store is not None
            time.sleep(0.01)
            return len(store.runs())

    counts = []
    try:
        for _ in range(4):  # bursts of 30 at once, each on threads that end afterwards
            with ThreadPoolExecutor(30) as threads:
                assert set(threads.map(request, range(120))) == {1}
            assert pool.idle() <= IDLE_KEPT
            counts.append(_fds_on(str(db)))
        # SQLite keeps a closed connection's descriptor while another of the file is open here, and reuses it: the
        # count follows the busiest moment, and stays there (it grew by each ended thread's store before)
        assert counts[-1] <= counts[0] + 2, f"descriptors on the store after each burst: {counts}"
    finally:
        pool.close()
    assert pool.idle() == 0 and _fds_on(str(db)) <= before


def test_a_postgres_store_whose_connection_the_server_ended_still_serves_the_next_request():
    """A server restart or idle timeout ends a kept connection: a store that is not a file is opened for each request."""
    psycopg = pytest.importorskip("psycopg")
    from fastapi.testclient import TestClient

    from planexec import Plan
    from planexec.store.pgserver import PostgresUnavailable, TempPostgres
    from planexec.web import create_app

    try:
        pg = TempPostgres().start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        store = open_store(pg.url)
        try:
            store.save_plan("r1", Plan.model_validate(plan(gated_step=False)))
        finally:
            store.close()
        with TestClient(create_app(pg.url, token=TOKEN, worker=False), base_url="http://127.0.0.1") as client:
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            assert client.get("/").status_code == 200
            with psycopg.connect(pg.url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
            answer = client.get("/")
            assert answer.status_code == 200, answer.text[:300]
    finally:
        pg.stop()


# --- in a real browser ---------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).parent / "artifacts" / "web"

browser = pytest.mark.browser
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): apt-get install chromium chromium-driver",
)


@pytest.fixture
def driver():
    """A headless Chromium driven by Selenium through the system chromedriver (no browser download)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000", "--disable-gpu"):
        options.add_argument(flag)
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def shot(d, name: str) -> Path:
    """Save a screenshot of the whole page under tests/artifacts/web/ and print where."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    height = d.execute_script("return document.documentElement.scrollHeight")
    width = d.execute_script("return window.innerWidth")
    d.set_window_size(max(width, 1280) if width >= 1000 else width, min(max(height + 140, 600), 4000))
    d.save_screenshot(str(path))
    d.set_window_size(1280, 1000)
    print(f"screenshot: {path}")
    return path


def sign_in(d, server: str, path: str = "/") -> None:
    d.get(f"{server}{path}{'&' if '?' in path else '?'}token={TOKEN}")
    assert "?token=" not in d.current_url and "&token=" not in d.current_url


def node_state(d, step_id: str) -> str:
    return d.find_element("id", f"node-{step_id}").get_attribute("data-state")


def wait_for(d, what: str, check, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # the element is being replaced by a live update: look again
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the page never showed {what}; at {d.current_url} it shows:\n{d.find_element('tag name', 'body').text[:2000]}")
        time.sleep(0.1)


def click(d, by: str, value: str) -> None:
    """Click an element of a live page, finding it again if an update replaced it under the click."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(50):
        try:
            d.find_element(by, value).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    pytest.fail(f"{value} kept being replaced by live updates: it could not be clicked")


def submit(d, by: str, value: str) -> None:
    """Click a form's button and wait until the page it posts to has replaced this one (a form post reloads the page)."""
    d.execute_script("window.__before_submit = true")
    click(d, by, value)
    wait_for(
        d,
        f"the page after {value} was posted",
        lambda: d.execute_script("return window.__before_submit !== true && document.readyState === 'complete'"),
    )


def open_panel(d, step_id: str, *expected: str) -> str:
    """Open step ``step_id``'s panel and return its text once it shows every ``expected`` piece.

    A live update may replace the panel between finding it and clicking or reading it (the page
    keeps a panel's open state across updates), so this looks again until the panel holds still.
    """
    seen: list[str] = []

    def shown() -> bool:
        panel = d.find_element("id", f"step-{step_id}")
        if panel.get_attribute("open") is None:
            panel.find_element("css selector", "summary").click()
            return False
        seen[:] = [panel.text]
        return all(piece in seen[0] for piece in expected)

    wait_for(d, f"step {step_id}'s panel open, showing {expected}", shown)
    return seen[0]


@browser
@needs_chromium
def test_a_waiting_plan_is_approved_in_the_page_which_follows_the_run_to_its_end(project, server, driver):
    run = start_waiting_on_plan(project, "r1")
    sign_in(driver, server)
    wait_for(driver, "the run in the list", lambda: "r1" in driver.find_element("id", "run-rows").text)
    assert "ship the app" in driver.find_element("id", "run-rows").text
    shot(driver, "runs")

    click(driver, "link text", "r1")
    assert "This plan waits for your approval" in driver.page_source
    assert [node_state(driver, s) for s in ("compile", "docs", "ship", "announce")] == ["pending"] * 4
    assert driver.find_element("id", "run-state").text == "running"
    shot(driver, "run-plan-waiting")

    [asked] = pending(project, "r1")
    driver.find_element("id", f"reason-{asked.approval_id}").send_keys("looks right")
    submit(driver, "id", f"approve-{asked.approval_id}")
    driver.execute_script("window.__same_page = true")  # from here, live updates change the page without reloading it
    wait_for(driver, "ship running or done", lambda: node_state(driver, "compile") in ("running", "succeeded"))
    wait_for(driver, "the run finished", lambda: driver.find_element("id", "run-state").text == "succeeded")
    assert driver.execute_script("return window.__same_page === true")
    assert [node_state(driver, s) for s in ("compile", "docs", "ship", "announce")] == ["succeeded"] * 4
    assert "state-succeeded" in driver.find_element("id", "node-announce").get_attribute("class")
    wait_for(driver, "the timeline", lambda: driver.find_element("css selector", "svg.gantt") is not None)
    open_panel(driver, "ship", "shipped app")
    shot(driver, "run-finished")

    out, _ = finish(run)
    assert json.loads(out)["status"] == "succeeded"
    [plan_approval] = [a for a in approvals(project, "r1") if a.step_id is None]
    assert (plan_approval.state.value, plan_approval.by, plan_approval.reason) == ("approved", USER, "looks right")


@browser
@needs_chromium
def test_a_pending_step_approval_is_granted_from_the_inbox_with_the_keyboard(project, server, driver):
    from selenium.webdriver.common.keys import Keys

    run = planexec("run", "--plan", "plan.json", "--tools", "tools.py", "--run-id", "r2", "--json", cwd=project)
    wait_until("ship waiting for approval", lambda: bool(pending(project, "r2", step_id="ship")), run)
    sign_in(driver, server, "/approvals")
    assert "step ship of run r2" in driver.find_element("tag name", "main").text
    assert "ship the app to production" in driver.find_element("tag name", "main").text
    shot(driver, "approvals-inbox")

    [asked] = pending(project, "r2", step_id="ship")
    reason = driver.find_element("id", f"reason-{asked.approval_id}")
    reason.send_keys("release window is open")
    reason.send_keys(Keys.TAB)  # the keyboard alone: from the reason to the Approve button
    assert driver.switch_to.active_element.get_attribute("id") == f"approve-{asked.approval_id}"
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for(driver, "the decision", lambda: "approved step ship of run r2 (by alice)" in driver.find_element("tag name", "main").text)
    shot(driver, "approvals-decided")

    out, _ = finish(run)
    assert json.loads(out)["status"] == "succeeded"
    assert len((project / "ship.log").read_text().splitlines()) == 1
    [step] = [a for a in approvals(project, "r2") if a.step_id == "ship"]
    assert (step.state.value, step.by, step.reason) == ("approved", USER, "release window is open")


@pytest.fixture
def configured(project):
    """planexec.toml names the project's policies (ship needs a person): the console shows their verdicts on a waiting plan."""
    (project / "planexec.toml").write_text('[planexec]\npolicies = "policies.yaml"\n')
    return project


@browser
@needs_chromium
def test_an_edit_with_mistakes_shows_them_by_step_and_the_fixed_edit_runs_as_version_2_of_the_same_run(configured, server, driver):
    project = configured
    run = start_waiting_on_plan(project, "r3")
    sign_in(driver, server, "/runs/r3")
    verdicts = driver.find_element("id", "verdicts").text
    assert "escalate" in verdicts and "ship" in verdicts  # the policies' verdicts on the waiting version
    driver.find_element("link text", "Edit this plan").click()
    editor = driver.find_element("id", "plan-text")
    bad = plan(gated_step=False)
    bad["steps"][2]["action"] = "shipp"  # no such tool: only the tools know
    bad["steps"][3]["depends_on"] = ["shipp"]  # no such step
    bad["steps"].append({"id": "tweet", "action": "build", "parameters": {"name": "tweet"}, "depends_on": ["announce"]})
    _type(driver, editor, json.dumps(bad, indent=2))
    driver.find_element("id", "save-edit").click()
    wait_for(driver, "the problems", lambda: driver.find_element("id", "problems").is_displayed())
    ship_problems = driver.find_element("id", "edit-step-ship").text
    announce_problems = driver.find_element("id", "edit-step-announce").text
    assert "shipp" in ship_problems and ("unknown_action" in ship_problems or "unknown_tool" in ship_problems), ship_problems
    assert "unknown_dependency" in announce_problems, announce_problems
    assert "no problem" in driver.find_element("id", "edit-step-tweet").text
    assert driver.find_element("id", "plan-text").get_attribute("aria-invalid") == "true"
    assert pending(project, "r3") and _versions(project, "r3") == [1]  # nothing saved: v1 still waits
    shot(driver, "edit-problems")

    good = plan(gated_step=False)
    good["steps"].append({"id": "tweet", "action": "build", "parameters": {"name": "${announce}"}})  # the news, as announced
    _type(driver, driver.find_element("id", "plan-text"), json.dumps(good, indent=2))
    driver.find_element("id", "edit-reason").send_keys("tell the world too")
    driver.find_element("id", "save-edit").click()
    wait_for(
        driver, "the run's page", lambda: driver.current_url.split("?")[0].endswith("/runs/r3") and driver.find_elements("id", "run-facts")
    )
    assert "saved your edit as v2" in driver.find_element("id", "done").text
    # the waiting process takes the edit, records it as v2 and its policies ask a person for the new content (ship is still in it)
    wait_for(driver, "version 2 waiting for approval", lambda: driver.find_element("id", "run-version").text == "2"
             and "Version 2 does not run until a person approves it" in driver.find_element("id", "review").text)  # fmt: skip
    [asked] = pending(project, "r3")
    assert asked.content_hash == _plan(project, "r3", 2).content_hash
    # read through wait_for: a live update may replace the panel between finding it and reading it
    wait_for(driver, "v2 beside v1, its changes marked", lambda: all(
        part in driver.find_element("css selector", "#version-2 table.diff").text for part in ("tweet", "added", "v1 beside v2")))  # fmt: skip
    wait_for(driver, "who edited v2 and why", lambda: "edited by alice: tell the world too" in driver.find_element("id", "version-2").text)
    wait_for(driver, "the new step pending", lambda: node_state(driver, "tweet") == "pending")
    shot(driver, "edit-version-2-waiting")

    driver.find_element("id", f"reason-{asked.approval_id}").send_keys("v2 it is")
    submit(driver, "id", f"approve-{asked.approval_id}")
    wait_for(driver, "version 2 finished", lambda: driver.find_element("id", "run-state").text == "succeeded")
    assert node_state(driver, "tweet") == "succeeded"
    wait_for(driver, "the panels", lambda: driver.find_element("css selector", '[data-step-state="tweet"]').text == "succeeded")
    provenance = "the output of step announce, made by tool.build with build (attempt 1)"
    open_panel(driver, "tweet", "built news", provenance)
    wait_for(
        driver,
        "the name input with its provenance",
        lambda: all(
            piece in driver.find_element("css selector", '#step-tweet tr[data-input="name"]').text for piece in ("built news", provenance)
        ),
    )
    shot(driver, "edit-version-2-finished")

    out, _ = finish(run)
    result = json.loads(out)
    assert (result["status"], result["run_id"]) == ("succeeded", "r3")
    store = open_store(str(project / "runs.db"), create=False)
    try:
        assert [v.version for v in store.plan_versions("r3")] == [1, 2]
        assert store.plan_versions("r3")[1].plan.revises == 1
        assert store.run("r3").plan_version == 2
        assert [e.step_id for e in store.events("r3") if e.type == "step_succeeded"][-1] == "tweet"  # the step v2 added ran
        [v1, v2] = [a for a in store.approvals("r3") if a.step_id is None]
        assert (v1.state.value, v1.by) == ("denied", USER) and "replaced by the edit v2" in v1.reason
        assert (v2.state.value, v2.by, v2.reason) == ("approved", USER, "v2 it is")
        assert "r3-v2" not in {r.run_id for r in store.runs(limit=None)}  # no second run
    finally:
        store.close()
    assert len((project / "ship.log").read_text().splitlines()) == 1


def _versions(project: Path, run_id: str) -> list[int]:
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return [v.version for v in store.plan_versions(run_id)]
    finally:
        store.close()


def _plan(project: Path, run_id: str, version: int):
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return next(v.plan for v in store.plan_versions(run_id) if v.version == version)
    finally:
        store.close()


def test_a_stale_edit_is_refused_in_the_page_with_the_reason_and_the_text_kept(project, server):
    run = start_waiting_on_plan(project, "r5")
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded", "Origin": server}
    page = request(server + "/runs/r5/edit", headers=auth)[1]
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    base = page.split('name="base" value="')[1].split('"')[0]
    theirs = plan(gated_step=False)
    theirs["steps"].append({"id": "blog", "action": "build", "parameters": {"name": "blog"}})
    (project / "theirs.json").write_text(json.dumps(theirs))
    done = subprocess.run([sys.executable, "-m", "planexec", "approve", "r5", "--edit", "theirs.json", "--by", "bob"],
                          cwd=project, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    mine = plan(gated_step=False)
    mine["steps"].append({"id": "tweet", "action": "build", "parameters": {"name": "tweet"}})
    form = urllib.parse.urlencode({"csrf": csrf, "base": base, "plan": json.dumps(mine), "reason": "mine"}).encode()
    status, body = request(server + "/runs/r5/edit", data=form, headers=auth)
    assert status == 409
    assert "Your edit was not saved" in body and "another edit won: v1 was replaced by v2, edited by bob" in body
    assert "tweet" in body  # the text stays on the page
    assert _plan(project, "r5", 2).step_ids[-1] == "blog" and _versions(project, "r5") == [1, 2]  # theirs stands, mine stored nothing
    run.kill()
    run.communicate()


@browser
@needs_chromium
def test_the_pages_are_readable_at_200_percent_zoom(project, server, driver):
    run = start_waiting_on_plan(project, "r4")
    sign_in(driver, server)
    # a 1280-pixel window at 200%: 640 CSS pixels wide, each drawn twice as large
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 640, "height": 900, "deviceScaleFactor": 2, "mobile": False})
    pages = (("/", "zoom-runs"), ("/runs/r4", "zoom-run"), ("/approvals", "zoom-approvals"), ("/start", "zoom-start"),
             ("/runs/r4/edit", "zoom-edit"))  # fmt: skip
    for path, name in pages:
        driver.get(server + path)
        overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"{path} scrolls sideways by {overflow}px at 200%"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
        print(f"screenshot: {ARTIFACTS / name}.png")
    labels = driver.execute_script(
        "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]"
        ".filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.id || e.name)"
    )
    assert labels == []  # every control has a label
    run.kill()
    run.communicate()


@browser
@needs_chromium
def test_the_editor_switches_to_compact_text_and_shows_its_problems_by_line(project, server, driver):
    run = start_waiting_on_plan(project, "r6")
    sign_in(driver, server, "/runs/r6/edit")
    driver.find_element("id", "to-compact").click()
    wait_for(driver, "the compact text", lambda: "Plan (compact: one line per step)" in driver.find_element("tag name", "main").text)
    text = driver.find_element("id", "plan-text").get_attribute("value")
    assert text.splitlines()[2] == 'ship. ship(name="app") after compile  # ship the app to production', text
    lines = text.rstrip("\n").splitlines()
    bad = [*lines[:2], lines[2].replace("after compile", "after compyle"), lines[3], 'tweet. build(name="tweet" after announce']
    _type(driver, driver.find_element("id", "plan-text"), "\n".join(bad) + "\n")
    driver.find_element("id", "save-edit").click()
    wait_for(driver, "the problems by line", lambda: driver.find_element("id", "problems").is_displayed())
    assert "unclosed bracket" in driver.find_element("id", "edit-line-5").text  # the line that does not parse, beside it
    assert "has-problem" not in driver.find_element("id", "edit-line-1").get_attribute("class")
    shot(driver, "edit-compact-problems")
    fixed = [*lines, 'tweet. build(name="tweet") after announce  # tell the world']
    _type(driver, driver.find_element("id", "plan-text"), "\n".join(fixed) + "\n")
    driver.find_element("id", "to-json").click()  # the other form keeps the change
    wait_for(driver, "the JSON text", lambda: '"tweet"' in driver.find_element("id", "plan-text").get_attribute("value"))
    driver.find_element("id", "to-compact").click()
    wait_for(driver, "the compact text again", lambda: "tweet. build" in driver.find_element("id", "plan-text").get_attribute("value"))
    driver.find_element("id", "save-edit").click()
    wait_for(driver, "the run's page", lambda: driver.find_elements("id", "done"))
    wait_until("v2 recorded by the waiting run", lambda: _version(project, "r6") == 2, run)
    v2 = _plan(project, "r6", 2)
    assert v2.step_ids == ["compile", "docs", "ship", "announce", "tweet"] and v2.steps[-1].instruction == "tell the world"
    run.kill()
    run.communicate()


@pytest.fixture
def library(project):
    """planexec.toml loads tools.py; the store's plan library holds `release`, whose one parameter `name` fills two steps."""
    (project / "planexec.toml").write_text('[planexec]\ntools = ["tools.py"]\n')
    store = open_store(str(project / "runs.db"))
    try:
        template = {
            "plan_id": "release",
            "goal": "ship {{name}}",
            "steps": [
                {"id": "compile", "action": "build", "parameters": {"name": "{{name}}"}},
                {"id": "ship", "action": "ship", "parameters": {"name": "{{name}}"}, "depends_on": ["compile"]},
            ],
        }
        store.save_template("release", template, params=["name"], description="build, then ship")
    finally:
        store.close()
    return project


@browser
@needs_chromium
def test_work_started_from_a_template_waits_for_review_in_the_page_then_runs(library, server, driver):
    project = library
    sign_in(driver, server, "/start")
    assert "A goal" in driver.find_element("tag name", "main").text
    driver.find_element("id", "choose-template").click()  # the only template is chosen
    wait_for(driver, "its parameters", lambda: driver.find_element("id", "param-name").is_displayed())
    driver.find_element("id", "more").send_keys("colour=blue")
    driver.find_element("id", "start-template").click()
    wait_for(driver, "the problems beside the fields", lambda: driver.find_elements("id", "template-problems"))
    assert "missing: the template needs a value" in driver.find_element("id", "problem-param-name").text
    assert "colour: the template declares no such parameter" in driver.find_element("id", "problem-more").text
    assert driver.find_element("id", "param-name").get_attribute("aria-invalid") == "true"
    shot(driver, "start-problems")
    with_no_runs = _runs(project)

    driver.find_element("id", "more").clear()
    driver.find_element("id", "param-name").send_keys("web")
    driver.find_element("id", "start-template").click()
    wait_for(driver, "the new run waiting for review", lambda: "This plan waits for your approval" in driver.page_source)
    run_id = driver.current_url.rstrip("/").split("/runs/")[1]
    assert run_id.startswith("web-") and run_id not in with_no_runs
    assert driver.find_element("css selector", ".goal-line").text == "ship web"
    assert not (project / "ship.log").exists()  # nothing ran before a person approved
    shot(driver, "start-template-waiting")
    [asked] = pending(project, run_id)
    submit(driver, "id", f"approve-{asked.approval_id}")
    wait_for(driver, "the run finished", lambda: driver.find_element("id", "run-state").text == "succeeded")
    assert (project / "ship.log").read_text().split()[1] == "web"
    wait_for(driver, "the panels", lambda: driver.find_element("css selector", '[data-step-state="ship"]').text == "succeeded")
    open_panel(driver, "ship", "the reviewed plan", "shipped web")


def _runs(project: Path) -> set[str]:
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return {r.run_id for r in store.runs(limit=None)}
    finally:
        store.close()


@browser
@needs_chromium
def test_the_inbox_is_usable_with_the_keyboard_alone_tabbing_from_the_top_to_approve(project, server, driver):
    from selenium.webdriver.common.keys import Keys

    run = start_waiting_on_plan(project, "r7")
    [asked] = pending(project, "r7")
    sign_in(driver, server, "/approvals")
    driver.find_element("tag name", "body").send_keys(Keys.TAB)  # from the top of the page, as a person with no mouse
    seen = []
    for _ in range(40):
        element = driver.switch_to.active_element
        seen.append(element.get_attribute("id") or element.text.strip() or element.tag_name)
        label = driver.execute_script(
            "const e = arguments[0]; return e.labels && e.labels.length ? e.labels[0].textContent : (e.getAttribute('aria-label') || e.textContent)",
            element,
        )
        assert label.strip(), f"{seen[-1]} has no label"
        if element.get_attribute("id") == f"reason-{asked.approval_id}":
            element.send_keys("checked with the keyboard")
        if element.get_attribute("id") == f"approve-{asked.approval_id}":
            break
        element.send_keys(Keys.TAB)
    else:
        pytest.fail(f"Tab never reached the Approve button: {seen}")
    assert seen[0] == "Skip to content" and f"reason-{asked.approval_id}" in seen  # skip link first, the reason before the button
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for(driver, "the decision", lambda: "approved plan v1 of run r7 (by alice)" in driver.find_element("tag name", "main").text)
    out, _ = finish(run)
    assert json.loads(out)["status"] == "succeeded"
    [decided] = approvals(project, "r7")
    assert (decided.state.value, decided.reason) == ("approved", "checked with the keyboard")


def _type(d, textarea, text: str) -> None:
    """Replace a textarea's text (typing thousands of characters key by key is slow; the value is set as a paste would)."""
    d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", textarea, text)


# --- the pictures and the versions, without a server ------------------------------------------


def test_the_graph_puts_steps_in_columns_by_depth_and_colours_them_by_state():
    from planexec import Plan
    from planexec.web.graph import depths, plan_svg

    p = Plan.from_data(plan(gated_step=True))
    assert depths(p) == {"compile": 0, "docs": 0, "ship": 1, "announce": 2}
    svg = plan_svg(p, {"compile": "succeeded", "ship": "running"})
    assert 'id="node-compile" data-step="compile" data-state="succeeded"' in svg
    assert 'class="node state-running" id="node-ship"' in svg
    assert 'data-state="pending"' in svg  # docs and announce: not started
    assert svg.count('class="edge"') == 2 and "<script" not in svg


def test_a_revision_is_shown_beside_the_version_before_with_its_changes_marked():
    from planexec import Plan
    from planexec.engine.results import PlanVersion
    from planexec.plan.diff import diff_plans
    from planexec.web.views import _versions

    v1 = Plan.from_data(plan(gated_step=False))
    data = plan(gated_step=False)
    data["steps"][1]["parameters"] = {"name": "manual"}
    data["steps"] = [s for s in data["steps"] if s["id"] != "announce"] + [{"id": "tweet", "action": "build", "parameters": {"name": "t"}}]
    v2 = Plan.from_data({**data, "version": 2, "revises": 1})
    shown = _versions([PlanVersion(version=1, plan=v1), PlanVersion(version=2, plan=v2, diff=diff_plans(v1, v2), reason="a replan")])
    assert shown[0]["rows"] == []
    kinds = {r["step_id"]: r["kind"] for r in shown[1]["rows"]}
    assert kinds == {"compile": "kept", "docs": "changed", "ship": "kept", "announce": "removed", "tweet": "added"}
    docs = next(r for r in shown[1]["rows"] if r["step_id"] == "docs")
    assert "app" not in docs["new"] and "manual" in docs["new"] and "docs" in docs["old"] and docs["fields"] == ["parameters"]


# --- starting a goal: the goal path through the team, the run through the store's queue -------------------

SCRIPTED_SITE = textwrap.dedent(
    """
    # loaded by every Python this test starts: the provider script: answers from $PLANEXEC_TEST_ANSWERS (no real model)
    import json
    import os

    from planexec.models.providers import register_provider
    from planexec.testing import ScriptedModel

    _answers = json.loads(os.environ["PLANEXEC_TEST_ANSWERS"])
    register_provider("script", lambda model, options: ScriptedModel(list(_answers), name=f"script:{model}"), replace=True)
    """
)
GOAL_PLAN = json.dumps(
    {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "calculator", "instruction": "multiply", "parameters": {"expression": "17 * 23"}},
            {"id": "s2", "worker": "tool", "action": "calculator", "instruction": "add", "parameters": {"expression": "4 + 1"}},
            {"id": "s3", "worker": "tool", "action": "concat", "instruction": "join",
             "parameters": {"parts": ["${s1}", "${s2}"], "separator": " and "}, "depends_on": ["s1", "s2"]},
        ]
    }
)  # fmt: skip


def test_the_goal_form_names_each_problem_by_its_field():
    from planexec.web.start import check_goal

    check = check_goal({"goal": "  ", "mode": "sideways", "model": "gpt-4", "worker_model": "nobody:x"})
    assert set(check.problems) == {"goal", "mode", "model", "worker_model"} and not check.goal
    assert "provider:model" in check.problems["model"][0] and "unknown provider 'nobody'" in check.problems["worker_model"][0]
    check = check_goal({"goal": "--help me", "mode": "plan", "model": "openai:gpt-4o-mini"})
    assert check.ok and check.goal == {"goal": "--help me", "mode": "plan", "model": "openai:gpt-4o-mini", "worker_model": ""}


def _serve(project: Path, port: int, *options: str) -> subprocess.Popen[str]:
    """``planexec serve`` in `project` with the environment as it is now (the scripted planner's site on its path)."""
    log = (project / "serve.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "planexec", "serve", "--port", str(port), "--store", str(project / "runs.db"), "--token", TOKEN,
         "--user", USER, *options],
        cwd=project, env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _post_goal(base: str, fields: dict[str, str]) -> tuple[int, str, str]:
    """(status, body, the redirect's run id) of the goal form posted as a browser would, with the page's CSRF token."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    page = request(base + "/start", headers=auth)[1]
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    form = urllib.parse.urlencode({"csrf": csrf, **fields}).encode()
    headers = {**auth, "Content-Type": "application/x-www-form-urlencoded", "Origin": base}

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(base + "/start/goal", data=form, headers=headers), timeout=30) as answer:
            return answer.status, answer.read().decode(), ""
    except urllib.error.HTTPError as exc:
        where = exc.headers.get("Location", "")
        return exc.code, exc.read().decode(), urllib.parse.unquote(where.rsplit("/runs/", 1)[-1]) if "/runs/" in where else ""


def test_a_goal_started_from_the_console_is_planned_by_the_team_waits_in_the_queue_then_its_worker_runs_it(project, monkeypatch):
    from planexec.web.views import run_detail

    site = project / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SCRIPTED_SITE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PLANEXEC_TEST_ANSWERS", json.dumps([GOAL_PLAN]))
    (project / "planexec.toml").write_text('[planexec]\nplanner_model = "script:planner"\n')  # no model in the form: the config's
    port = free_port()
    console = _serve(project, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("the console", lambda: _console_up(base), console)
        before = _children(console.pid)
        status, _, run_id = _post_goal(base, {"goal": "two sums joined", "mode": "plan"})
        assert status == 303 and run_id.startswith("web-")
        wait_until("the goal's plan waiting for review", lambda: bool(pending(project, run_id)), console)
        store = open_store(str(project / "runs.db"), create=False)
        try:
            [v1] = store.plan_versions(run_id)
            summary = store.run(run_id)
            assert v1.plan.step_ids == ["s1", "s2", "s3"] and summary.goal == "two sums joined"
            assert summary.status.value == "waiting" and store.queued_run(run_id).submitted_by == USER
            assert not [e for e in store.events(run_id) if e.type == "step_started"]  # nothing runs before a person approves
            page = request(base + f"/runs/{run_id}", headers={"Authorization": f"Bearer {TOKEN}"})[1]
            assert "This plan waits for your approval" in page
            store.decide_approval(run_id, approved=True, by="alice", content_hash=v1.plan.content_hash)
        finally:
            store.close()
        wait_until("the console's worker ran it", lambda: _status(project, run_id) == "succeeded", console)
        assert _children(console.pid) <= before  # no child process: the console's own worker thread ran it
    finally:
        console.terminate()
        console.wait(timeout=WAIT)
    store = open_store(str(project / "runs.db"), create=False)
    try:
        [finished] = [e for e in store.events(run_id) if e.type == "run_finished" and e.status.value == "succeeded"]
        assert finished.answer == "391 and 5"
        assert any(e.type == "plan_drafted" and e.model == "script:planner" for e in store.events(run_id))
        detail = run_detail(store, run_id)  # the run's page: the planner's usage is the run's, by role
        roles = dict(detail.roles)
        assert list(roles) == ["planner"] and "1 model calls" in roles["planner"] and roles["planner"] in detail.usage
        s3 = next(st for st in detail.steps if st["step_id"] == "s3")
        assert [i["value"] for i in s3["inputs"]] == ["[\n  391,\n  5\n]", " and "]  # the outputs put in, with their types
        assert s3["inputs"][0]["sources"][0].startswith("the output of step s1, made by tool.calculator")
    finally:
        store.close()


SCRIPTED_BY_MODEL = textwrap.dedent(
    """
    # the provider script: each model name answers from its own list in $PLANEXEC_TEST_ANSWERS_BY_MODEL
    import json
    import os

    from planexec.models.providers import register_provider
    from planexec.testing import ScriptedModel

    _answers = json.loads(os.environ["PLANEXEC_TEST_ANSWERS_BY_MODEL"])
    register_provider("script", lambda model, options: ScriptedModel(list(_answers.get(model, [])), name=f"script:{model}"), replace=True)
    """
)


def test_a_goal_the_planner_cannot_plan_says_why_on_its_page_and_a_console_without_a_worker_runs_nothing(project, monkeypatch):
    site = project / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SCRIPTED_BY_MODEL)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PLANEXEC_TEST_ANSWERS_BY_MODEL", json.dumps({"planner": ["no plan here"] * 10, "second": [GOAL_PLAN]}))
    (project / "planexec.toml").write_text('[planexec]\nplanner_model = "script:planner"\n')
    port = free_port()
    console = _serve(project, port, "--no-worker")
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        wait_until("the console", lambda: _console_up(base), console)
        status, _, failed = _post_goal(base, {"goal": "two sums joined", "mode": "plan"})
        assert status == 303
        wait_until("the reason on the page", lambda: "stored no run" in request(base + f"/runs/{failed}", headers=auth)[1], console)
        page = request(base + f"/runs/{failed}", headers=auth)[1]
        assert "PlanningError" in page and "Traceback" not in page and "data-retry" not in page
        status, body, _ = _post_goal(base, {"goal": "", "mode": "plan"})
        assert status == 422 and "say what you want done" in body
        _, _, run_id = _post_goal(base, {"goal": "two sums joined", "mode": "plan", "model": "script:second"})
        wait_until("the plan waiting", lambda: bool(pending(project, run_id)), console)
        store = open_store(str(project / "runs.db"), create=False)
        try:
            [v1] = store.plan_versions(run_id)
            assert store.events(run_id)[0].setup["models"]["planner"] == "script:second"  # the form's model, kept for the worker
            store.decide_approval(run_id, approved=True, by="alice", content_hash=v1.plan.content_hash)
        finally:
            store.close()
        time.sleep(2.0)
        assert _status(project, run_id) == "waiting"  # approved, queued: no worker here, a fleet's would take it
    finally:
        console.terminate()
        console.wait(timeout=WAIT)
    worker = planexec("worker", "--once", "--json", "--store", str(project / "runs.db"), cwd=project)
    out, err = finish(worker)
    assert worker.returncode == 0, err
    assert [(r["run_id"], r["outcome"]) for r in json.loads(out)["runs"]] == [(run_id, "succeeded")]


def _console_up(base: str) -> bool:
    try:
        return request(base + "/", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    except OSError:
        return False


def _status(project: Path, run_id: str) -> str:
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return store.run(run_id).status.value
    finally:
        store.close()


def _children(pid: int) -> set[int]:
    """The processes `pid` started (any of its threads), as Linux lists them."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        listed = task / "children"
        if listed.exists():
            found |= {int(c) for c in listed.read_text().split()}
    return found


# --- an edit becomes the next version of the same run (the store, the engine, the CLI) -----------


def _engine_and_plan(tmp_path):
    from planexec import Plan, Registry, tool

    @tool
    def build(name: str) -> str:
        """Idempotent work."""
        return f"built {name}"

    registry = Registry.default()
    registry.add_tool(build)
    v1 = Plan.from_data({"plan_id": "p", "goal": "build", "steps": [{"id": "a", "action": "build", "parameters": {"name": "a"}}]})
    return registry, v1


def _next_version(old, *extra_steps: dict):
    from planexec import Plan

    data = old.model_dump(mode="json", by_alias=True)
    data.pop("content_hash", None)
    data["steps"] += list(extra_steps)
    data["version"], data["revises"] = old.version + 1, old.version
    return Plan.from_data(data)


async def _until(check, timeout: float = WAIT) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        await asyncio.sleep(0.02)


def _pending_in(store, run_id: str, content_hash: str) -> bool:
    try:
        return any(a.content_hash == content_hash for a in store.approvals(run_id, pending_only=True))
    except RunNotFoundError:
        return False


def test_an_edit_of_a_waiting_plan_runs_as_version_2_of_the_same_run(tmp_path):
    import asyncio

    from planexec import Engine
    from planexec.engine.approval import PlanApprover
    from planexec.store.approvals import edit_plan

    registry, v1 = _engine_and_plan(tmp_path)
    store = open_store(str(tmp_path / "runs.db"))
    v2 = _next_version(v1, {"id": "b", "action": "build", "parameters": {"name": "b"}, "depends_on": ["a"]})

    async def main():
        run = Engine(registry, store=store, plan_approver=PlanApprover(store, poll=0.02)).start(v1, run_id="e1")
        result = asyncio.ensure_future(run.result())
        await _until(lambda: _pending_in(store, "e1", v1.content_hash))
        edit_plan(store, "e1", content_hash=v1.content_hash, plan=v2, by="alice", reason="b too")
        await _until(lambda: _pending_in(store, "e1", v2.content_hash))  # an edit is approved like any version: a person here
        assert store.run("e1").plan_version == 2  # recorded as a revision while it waits
        store.decide_approval("e1", approved=True, by="bob", content_hash=v2.content_hash)
        return await result

    try:
        result = asyncio.run(main())
        assert (result.status.value, list(result.steps)) == ("succeeded", ["a", "b"])
        versions = store.plan_versions("e1")
        assert [(v.version, v.reason) for v in versions] == [(1, "the first plan"), (2, "edited by alice: b too")]
        assert versions[1].diff.added == ["b"] and versions[1].plan.revises == 1
        [first, second] = store.approvals("e1")
        assert (first.state.value, first.by) == ("denied", "alice") and "replaced by the edit v2" in first.reason
        assert (second.content_hash, second.state.value, second.by) == (v2.content_hash, "approved", "bob")
        kinds = [e.type for e in store.events("e1")]
        assert kinds.index("plan_revised") < kinds.index("step_started")  # nothing of v1 ran
        assert verify_chain(store, "e1")
    finally:
        store.close()


def verify_chain(store, run_id: str) -> bool:
    from planexec.store import verify_run

    return verify_run(store, run_id).ok


def test_an_edit_that_cannot_run_in_the_waiting_process_is_refused_and_nothing_runs(tmp_path):
    import asyncio

    from planexec import Engine
    from planexec.engine.approval import PlanApprover
    from planexec.store.approvals import edit_plan

    registry, v1 = _engine_and_plan(tmp_path)
    store = open_store(str(tmp_path / "runs.db"))
    bad = _next_version(v1, {"id": "b", "action": "teleport", "parameters": {}})  # no such tool where the run waits

    async def main():
        run = Engine(registry, store=store, plan_approver=PlanApprover(store, poll=0.02)).start(v1, run_id="e2")
        result = asyncio.ensure_future(run.result())
        await _until(lambda: _pending_in(store, "e2", v1.content_hash))
        edit_plan(store, "e2", content_hash=v1.content_hash, plan=bad, by="alice")
        return await result

    try:
        result = asyncio.run(main())
        assert result.status.value == "failed" and "the edit v2 by alice cannot run here" in result.reason
        assert "teleport" in result.reason and "nothing ran" in result.reason
        assert not any(e.type == "step_started" for e in store.events("e2"))
    finally:
        store.close()


def test_a_stale_edit_is_refused_naming_the_edit_that_won_and_stores_nothing(tmp_path):
    from planexec import Plan
    from planexec.errors import ApprovalError
    from planexec.store.approvals import edit_plan

    _, v1 = _engine_and_plan(tmp_path)
    store = open_store(str(tmp_path / "runs.db"))
    try:
        store.save_plan("e3", v1)
        from planexec.engine.events import RunStarted, utcnow

        store.append([RunStarted(run_id="e3", seq=0, at=utcnow(), plan_id="p", plan_version=1, content_hash=v1.content_hash,
                                 goal="build", step_ids=["a"])])  # fmt: skip
        store.request_approval("e3", v1.content_hash)
        mine = _next_version(v1, {"id": "b", "action": "build", "parameters": {"name": "b"}})
        theirs = _next_version(v1, {"id": "c", "action": "build", "parameters": {"name": "c"}})
        wrong = Plan.from_data({**mine.model_dump(mode="json", by_alias=True, exclude={"content_hash"}), "version": 3})
        with pytest.raises(ApprovalError, match="an edit of v1 is v2 revising v1, not v3"):
            edit_plan(store, "e3", content_hash=v1.content_hash, plan=wrong, by="carol")
        edit_plan(store, "e3", content_hash=v1.content_hash, plan=theirs, by="bob")
        with pytest.raises(ApprovalError, match="already replaced by the edit v2 by bob"):
            edit_plan(store, "e3", content_hash=v1.content_hash, plan=mine, by="alice")
        assert [v.plan.step_ids for v in store.plan_versions("e3")] == [["a"], ["a", "c"]]  # the refused edit stored nothing
    finally:
        store.close()


def test_planexec_approve_edit_replaces_the_waiting_version_and_the_run_goes_on_with_it(project, capsys):
    from planexec.cli.main import main

    run = start_waiting_on_plan(project, "c1")
    edited = plan(gated_step=False)
    edited["steps"].append({"id": "tweet", "action": "build", "parameters": {"name": "tweet"}, "depends_on": ["announce"]})
    bad = json.loads(json.dumps(edited))
    bad["steps"][-1]["action"] = "twet"
    (project / "bad.json").write_text(json.dumps(bad))
    (project / "edited.json").write_text(json.dumps(edited))
    assert main(["approve", "c1", "--edit", "bad.json", "--by", "dana"]) == 1  # checked against the run's tools first
    assert "twet" in capsys.readouterr().out
    assert main(["approve", "c1", "--edit", "edited.json", "--by", "dana", "--reason", "tell the world"]) == 0
    assert "replaced by your edit v2" in capsys.readouterr().out
    wait_until("v2 waiting for a person (ship needs one)", lambda: bool(pending(project, "c1")) and _version(project, "c1") == 2, run)
    assert main(["approve", "c1", "--edit", "edited.json"]) == 2  # the same edit of v2 again: it would change nothing
    assert "the edit changes nothing v2 does" in capsys.readouterr().err
    (project / "stale.json").write_text(json.dumps({**edited, "version": 1}))  # written against v1, which no longer waits
    assert main(["approve", "c1", "--edit", "stale.json"]) == 2
    assert "stale.json edits plan v1, but v2 waits now" in capsys.readouterr().err
    assert main(["approve", "c1", "--by", "erin"]) == 0
    out, _ = finish(run)
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["run_id"] == "c1" and "tweet" in result["steps"]
    store = open_store(str(project / "runs.db"), create=False)
    try:
        assert [v.version for v in store.plan_versions("c1")] == [1, 2]
        assert store.plan_versions("c1")[1].reason == "edited by dana: tell the world"
    finally:
        store.close()


def _version(project: Path, run_id: str) -> int:
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return store.run(run_id).plan_version
    finally:
        store.close()


def test_a_console_whose_team_cannot_be_made_still_shows_its_runs_and_says_why_it_starts_nothing(project):
    """planexec.toml names a policy file that is not there: the console starts (no worker), its pages answer, and the
    start form says why nothing was started, beside the form; no traceback reaches the page."""
    from fastapi.testclient import TestClient

    from planexec.web import create_app

    def broken() -> object:
        raise ValueError("policy file 'missing.yaml' does not exist")

    open_store(str(project / "runs.db")).close()  # a store there: the console would start its worker at once
    app = create_app(str(project / "runs.db"), token=TOKEN, team=broken)  # type: ignore[arg-type]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/", headers=auth).status_code == 200
        page = client.get("/start", headers=auth).text
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        answer = client.post(
            "/start/goal", data={"csrf": csrf, "goal": "add two numbers", "mode": "plan"},
            headers={**auth, "Origin": "http://127.0.0.1"}, follow_redirects=False,
        )  # fmt: skip
    assert answer.status_code == 422
    assert "nothing was started: policy file &#39;missing.yaml&#39; does not exist" in answer.text and "Traceback" not in answer.text
