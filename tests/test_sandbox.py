"""The bubblewrap sandbox of `run_python`: one test per escape the old runner allowed, the refusal, the ordinary things.

Each escape test runs code that tries the escape and then checks the host
from outside; before bubblewrap each of them succeeded (no file-system
isolation, no process cap, no disk quota; in audit-hook mode /proc, ctypes
and background processes too).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from planexec import Tool
from planexec.errors import ToolError
from planexec.workers.toolkit import python_tool, sandbox_available
from planexec.workers.toolkit.sandbox.cgroups import pids_root

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (bwrap), the sandbox run_python runs code in: apt-get install bubblewrap"
)
MB = 2**20


def run(tool: Tool, code: str, stdin: str = "") -> dict:
    return asyncio.run(tool.invoke({"code": textwrap.dedent(code), "stdin": stdin}))


def size_of(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# -- escapes ------------------------------------------------------------------------------------


@needs_bwrap
def test_etc_shadow_cannot_be_read(ws):
    out = run(
        python_tool(ws),
        """
        for path in ("/etc/shadow", "/etc/gshadow", "/root/.bashrc"):
            try:
                print(path, "READ", len(open(path).read()))
            except OSError as exc:
                print(path, "BLOCKED", type(exc).__name__)
    """,
    )
    assert [line.split()[1] for line in out["stdout"].splitlines()] == ["BLOCKED"] * 3, out


@needs_bwrap
def test_writes_outside_the_workspace_leave_nothing_on_the_host(ws, tmp_path):
    token = secrets.token_hex(6)
    targets = [tmp_path / f"beside-{token}.txt", Path(f"/tmp/planexec-escape-{token}.txt"), Path.home() / f"escape-{token}.txt"]
    out = run(
        python_tool(ws),
        f"""
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                print(path, "WROTE")
            except OSError as exc:
                print(path, "BLOCKED", type(exc).__name__)
        open("inside.txt", "w").write("fine")
    """,
    )
    assert out["exit_code"] == 0, out
    for target in targets:
        assert not target.exists(), f"{target} was written on the host"
    assert (ws / "inside.txt").read_text() == "fine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]


_FIND_SECRET = """
import glob, os
secret = {secret!r}
print("environ", secret in repr(dict(os.environ)))
readable, found = 0, []
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/task/*/environ"):
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    readable += 1
    if secret.encode() in data:
        found.append(path)
print("readable", readable > 0)
print("found", found)
"""

# An engine started with the key in its environment (so it is in its /proc/PID/environ too) runs the code.
_ENGINE = """
import asyncio, json, sys
from planexec.workers.toolkit import python_tool
out = asyncio.run(python_tool(sys.argv[1]).invoke({"code": sys.stdin.read()}))
print(json.dumps(out))
"""


@needs_bwrap
def test_the_engines_environment_is_unreachable(ws, monkeypatch):
    secret = f"sk-test-{secrets.token_hex(12)}"
    monkeypatch.setenv("PLANEXEC_TEST_API_KEY", secret)  # in os.environ of this process
    out = run(python_tool(ws), _FIND_SECRET.format(secret=secret))
    assert out["stdout"].splitlines() == ["environ False", "readable True", "found []"], out
    engine = subprocess.run(  # and in the environment a process started with, readable in /proc/PID/environ
        [sys.executable, "-c", _ENGINE, str(ws)],
        input=_FIND_SECRET.format(secret=secret),
        env={**os.environ, "PLANEXEC_TEST_API_KEY": secret},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(engine.stdout)
    assert out["stdout"].splitlines() == ["environ False", "readable True", "found []"], out


@needs_bwrap
def test_ctypes_system_changes_nothing_outside(ws, tmp_path):
    outside = tmp_path / f"ctypes-{secrets.token_hex(6)}"
    out = run(
        python_tool(ws),
        f"""
        import ctypes
        libc = ctypes.CDLL(None)
        print("outside", libc.system(b"touch {outside}"))
        print("inside", libc.system(b"touch made-by-system"))
    """,
    )
    assert out["stdout"].splitlines()[1] == "inside 0", out  # programs do run, inside the sandbox
    assert (ws / "made-by-system").exists()
    assert not outside.exists()


@needs_bwrap
def test_a_background_process_is_gone_after_the_call(ws):
    token = secrets.token_hex(8)
    out = run(
        python_tool(ws, timeout=10),
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:  # double fork: the grandchild is nobody's child and in its own session
                open("bg-started", "w").close()
                time.sleep(1.0)
                open("bg-survived", "w").close()
                os.execv("/bin/sleep", ["sleep", "30", {token!r}])
            os._exit(0)
        while not os.path.exists("bg-started"):
            time.sleep(0.01)
        print("parent done")
    """,
    )
    assert out["stdout"] == "parent done\n" and out["exit_code"] == 0, out
    time.sleep(1.5)
    assert (ws / "bg-started").exists() and not (ws / "bg-survived").exists()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert token.encode() not in cmdline.read_bytes(), f"a background process survived: {cmdline}"
        except OSError:
            continue


@needs_bwrap
def test_a_fork_bomb_is_capped(ws):
    out = run(
        python_tool(ws, max_processes=64, timeout=20),
        """
        import os, time
        children, error = 0, None
        for _ in range(400):
            try:
                pid = os.fork()
            except OSError as exc:
                error = exc.errno
                break
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            children += 1
        print(children, error)
    """,
    )
    children, error = out["stdout"].split()
    assert 1 <= int(children) < 64 and error == "11", out  # EAGAIN past the cap (the parent is one of the 64)


@needs_bwrap
def test_the_disk_quota_stops_a_writer_of_many_large_files(ws):
    out = run(
        python_tool(ws, max_disk_mb=50, timeout=60),
        """
        block = bytes(64 * 2**20)
        for i in range(20):
            with open(f"fill-{i}.bin", "wb") as f:
                f.write(block)
            print("wrote", i, flush=True)
    """,
    )
    assert out["quota_exceeded"] and not out["timed_out"] and out["exit_code"] != 0, out
    assert size_of(ws) <= (50 + 64) * MB, f"the workspace grew to {size_of(ws) / MB:.0f} MiB"


@needs_bwrap
def test_the_disk_quota_counts_deleted_files_still_open(ws):
    out = run(
        python_tool(ws, max_disk_mb=50, timeout=60),
        """
        import os, time
        block, held = bytes(16 * 2**20), []
        for i in range(40):
            f = open(f"hidden-{i}.bin", "wb")
            os.unlink(f.name)  # gone from the directory, its blocks still in use while it is open
            f.write(block)
            f.flush()
            held.append(f)
        time.sleep(5)
        print("held", len(held))
    """,
    )
    assert out["quota_exceeded"] and "held" not in out["stdout"], out


@needs_bwrap
def test_a_loopback_listener_of_the_host_cannot_be_reached(ws):
    server = socket.create_server(("127.0.0.1", 0))
    port, accepted = server.getsockname()[1], []

    def serve() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    try:
        out = run(
            python_tool(ws),
            f"""
            import ctypes, socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3)
                print("socket CONNECTED")
            except OSError as exc:
                print("socket BLOCKED", type(exc).__name__)
            # a fresh interpreter started through libc, past any hook in this one
            child = "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
            status = ctypes.CDLL(None).system(("{sys.executable} -c " + repr(child) + " 2>/dev/null").encode())
            print("child", "CONNECTED" if status == 0 else "BLOCKED")
        """,
        )
    finally:
        server.close()
    assert [line.split()[:2] for line in out["stdout"].splitlines()] == [["socket", "BLOCKED"], ["child", "BLOCKED"]], out
    assert accepted == []


@needs_bwrap
def test_a_hard_link_to_a_file_outside_the_workspace_fails(ws, tmp_path):
    outside = tmp_path / "outside.txt"  # on the same file system as the workspace
    outside.write_text("host data")
    out = run(
        python_tool(ws),
        f"""
        import os
        for i, target in enumerate(["/etc/hostname", {str(outside)!r}, "/usr/bin/env"]):
            try:
                os.link(target, f"link-{{i}}")
                print("LINKED", target)
            except OSError as exc:
                print("BLOCKED", type(exc).__name__)
    """,
    )
    assert [line.split()[0] for line in out["stdout"].splitlines()] == ["BLOCKED"] * 3, out
    assert not list(ws.glob("link-*")) and outside.stat().st_nlink == 1


# -- refusal ------------------------------------------------------------------------------------


def test_without_bubblewrap_code_is_refused_and_not_run(tmp_path):
    missing = tmp_path / "no-such-bwrap"
    tool = python_tool(tmp_path, bwrap=missing)  # building the tool works; calling it does not
    assert sandbox_available(str(missing)) is False
    with pytest.raises(ToolError, match="bubblewrap") as raised:
        run(tool, "open('ran.txt', 'w').close()")
    assert "apt-get install bubblewrap" in str(raised.value) and raised.value.tool == "run_python"
    assert not (tmp_path / "ran.txt").exists()


@needs_bwrap
def test_the_sandbox_is_available_here():
    assert sandbox_available()  # bwrap is installed: it must work, never quietly fall back


# -- the ordinary things ------------------------------------------------------------------------


@needs_bwrap
def test_print_files_stdin_and_the_environment(ws):
    (ws / "data.csv").write_text("a,b\n1,2\n3,4\n")
    out = run(
        python_tool(ws),
        """
        import os, sys, tempfile
        rows = open("data.csv").read().split()[1:]
        print("sum", sum(int(x) for row in rows for x in row.split(",")))
        print("stdin", sys.stdin.read())
        print("home", os.getcwd() == os.environ["HOME"])
        with open("result.txt", "w") as f:
            f.write("10")
        with tempfile.TemporaryFile() as t:  # the private /tmp works
            t.write(b"scratch")
        print(sorted(os.environ))
    """,
        stdin="from the step",
    )
    assert out["stdout"].splitlines() == [
        "sum 10",
        "stdin from the step",
        "home True",
        "['HOME', 'LANG', 'LC_ALL', 'MALLOC_ARENA_MAX', 'PATH']",
    ], out
    assert out["exit_code"] == 0 and not out["timed_out"] and not out["quota_exceeded"]
    assert out["isolation"] == "bubblewrap"
    assert (ws / "result.txt").read_text() == "10"


@needs_bwrap
def test_a_timeout_kills_the_run(ws):
    out = run(python_tool(ws, timeout=1.0), "import time\nopen('started', 'w').close()\ntime.sleep(3)\nopen('finished', 'w').close()\n")
    assert out["timed_out"] and not out["quota_exceeded"] and 1.0 <= out["duration"] < 3
    time.sleep(2.5)
    assert (ws / "started").exists() and not (ws / "finished").exists()


@needs_bwrap
def test_output_is_bounded(ws):
    out = run(python_tool(ws, max_output=1000), "import sys\nprint('x' * 100_000)\nprint('e' * 5000, file=sys.stderr)")
    assert out["truncated"] and out["stdout"].startswith("x" * 1000)
    assert out["stdout"].endswith("[... 99001 more bytes truncated]") and out["stderr"].endswith("[... 4001 more bytes truncated]")


@needs_bwrap
def test_the_runs_pids_cgroup_is_removed(ws):
    root = pids_root()
    mine = f"planexec-{os.getpid()}-*"
    run(python_tool(ws), "import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(30)\n")
    assert root is None or not list(root.path.glob(mine))
