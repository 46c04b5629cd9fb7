"""The built-in toolkit: workspace file tools, the sandboxed Python runner, the calculator."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from planexec import Tool
from planexec.errors import ToolError, ToolInputError
from planexec.workers.toolkit import calculator, default_toolkit, file_tools, python_tool
from test_sandbox import needs_bwrap  # skips with the install command when bubblewrap is missing


def call(tool: Tool, **arguments):
    """Invoke a tool the way the engine does: checked arguments, JSON output."""
    return asyncio.run(tool.invoke(arguments))


@pytest.fixture
def files(tmp_path):
    return {t.name: t for t in file_tools(tmp_path, max_read_bytes=200, max_read_lines=5, max_entries=3)}


# -- files -------------------------------------------------------------------------------------


def test_file_tools_are_named_and_flagged_for_the_engine(tmp_path):
    tools = {t.name: t for t in file_tools(tmp_path)}
    assert sorted(tools) == ["list_files", "read_file", "search_files", "write_file"]
    assert tools["write_file"].requires_approval and not tools["write_file"].idempotent
    for name in ("read_file", "list_files", "search_files"):
        assert tools[name].idempotent and not tools[name].requires_approval
    assert tools["read_file"].output_schema()["properties"]["next_start_line"]
    assert tools["search_files"].output_schema()["$defs"]["SearchMatch"]["required"] == ["path", "line", "text"]


def test_read_file_returns_text_and_continues_where_it_was_cut(tmp_path, files):
    (tmp_path / "notes.txt").write_text("".join(f"line {n}\n" for n in range(1, 13)))
    first = call(files["read_file"], path="notes.txt")
    assert first["text"] == "line 1\nline 2\nline 3\nline 4\nline 5\n"
    assert first["truncated"] and first["next_start_line"] == 6 and "start_line=6" in first["note"]
    last = call(files["read_file"], path="notes.txt", start_line=11)
    assert last["text"] == "line 11\nline 12\n" and last["end_line"] == 12
    assert not last["truncated"] and last["next_start_line"] is None
    assert call(files["read_file"], path="notes.txt", start_line=2, max_lines=1)["text"] == "line 2\n"


def test_read_file_cuts_at_the_byte_bound(tmp_path, files):
    (tmp_path / "wide.txt").write_text("a" * 150 + "\n" + "b" * 150 + "\n")
    (tmp_path / "one-line.json").write_text("x" * 10_000)
    wide = call(files["read_file"], path="wide.txt")
    assert wide["text"] == "a" * 150 + "\n" and wide["next_start_line"] == 2
    long = call(files["read_file"], path="one-line.json")
    assert long["text"] == "x" * 200 + "\n" and long["truncated"] and "longer than 200 bytes" in long["note"]


def test_binary_files_are_reported_not_dumped(tmp_path, files):
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    out = call(files["read_file"], path="image.png")
    assert out["binary"] and out["text"] == ""
    assert "binary file (272 bytes, image/png)" in out["note"]


@pytest.mark.parametrize("name", ["read_file", "list_files", "search_files", "write_file"])
@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd", "escape/outside.txt"])
def test_paths_outside_the_workspace_are_refused(tmp_path, name, path):
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("secret\n")
    (workspace / "escape").symlink_to(tmp_path)  # a symlink pointing out of the workspace
    tool = {t.name: t for t in file_tools(workspace)}[name]
    arguments = {"query": "secret", "path": path} if name == "search_files" else {"path": path}
    if name == "write_file":
        arguments.update(content="overwritten", overwrite=True)
    with pytest.raises(ToolError) as info:
        call(tool, **arguments)
    message = str(info.value)
    assert repr(path) in message and str(workspace) in message
    assert info.value.tool == name and info.value.problems[0].rule in ("outside_workspace", "absolute_path", "symlink")
    assert (tmp_path / "outside.txt").read_text() == "secret\n"


def test_list_files_does_not_look_through_a_symlink_that_points_out(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("")
    (workspace / "escape").symlink_to(tmp_path)
    (workspace / "own.txt").write_text("")
    listing = {t.name: t for t in file_tools(workspace)}["list_files"]
    for pattern in ("*/*", "escape/*", "**/*.txt"):
        assert "secret" not in str(call(listing, pattern=pattern)), pattern
    assert [e["path"] for e in call(listing, recursive=True)["entries"]] == ["escape", "own.txt"]
    assert call(listing)["entries"][0] == {"path": "escape", "kind": "symlink", "size": None}


def test_a_symlink_is_refused_even_when_it_points_inside(tmp_path, files):
    (tmp_path / "real.txt").write_text("hello\n")
    (tmp_path / "alias.txt").symlink_to(tmp_path / "real.txt")
    with pytest.raises(ToolError, match="'alias.txt' is a symlink") as info:
        call(files["read_file"], path="alias.txt")
    assert info.value.problems[0].rule == "symlink"


def test_missing_files_and_directories_are_clear_errors(tmp_path, files):
    (tmp_path / "dir").mkdir()
    with pytest.raises(ToolError, match="no such file or directory: 'nope.txt'"):
        call(files["read_file"], path="nope.txt")
    with pytest.raises(ToolError, match="is a directory; use list_files"):
        call(files["read_file"], path="dir")
    with pytest.raises(ToolInputError):  # the schema's minimum, checked before the function runs
        call(files["read_file"], path="dir", start_line=0)


def test_list_files_matches_patterns_and_recurses_on_request(tmp_path, files):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "src" / "pkg" / "b.py").write_text("")
    (tmp_path / "src" / "c.txt").write_text("")
    flat = call(files["list_files"], path="src", pattern="*.py")
    assert flat["entries"] == [{"path": "src/a.py", "kind": "file", "size": 6}]
    deep = call(files["list_files"], path="src", pattern="*.py", recursive=True)
    assert [e["path"] for e in deep["entries"]] == ["src/a.py", "src/pkg/b.py"]
    everything = call(files["list_files"], recursive=True)
    assert everything["truncated"] and len(everything["entries"]) == 3 and "truncated at 3" in everything["note"]
    assert call(files["list_files"], path="src")["entries"][2] == {"path": "src/pkg", "kind": "dir", "size": None}
    with pytest.raises(ToolError, match="may not be absolute or contain '..'"):
        call(files["list_files"], pattern="../*")


def test_search_files_reports_path_line_and_text(tmp_path, files):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("intro\nTODO: write tests\ndone\n")
    (tmp_path / "b.py").write_text("x = 1  # todo later\n")
    (tmp_path / "blob.bin").write_bytes(b"TODO\0\0\0")
    found = call(files["search_files"], query="TODO")
    assert found["matches"] == [{"path": "docs/a.md", "line": 2, "text": "TODO: write tests"}]
    assert found["files_skipped"] == 1 and found["files_searched"] == 2
    loose = call(files["search_files"], query="todo", ignore_case=True, glob="*.py")
    assert loose["matches"] == [{"path": "b.py", "line": 1, "text": "x = 1  # todo later"}]
    pattern = call(files["search_files"], query=r"^\w+$", regex=True, path="docs/a.md")
    assert [m["line"] for m in pattern["matches"]] == [1, 3]
    capped = call(files["search_files"], query=r"\w", regex=True, max_results=2)
    assert len(capped["matches"]) == 2 and capped["truncated"]
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed'"):
        call(files["search_files"], query="(unclosed", regex=True)


def test_write_file_creates_and_overwrites_only_when_asked(tmp_path, files):
    out = call(files["write_file"], path="reports/q1.md", content="# Q1\n")
    assert out == {"path": "reports/q1.md", "bytes_written": 5, "created": True}
    assert (tmp_path / "reports" / "q1.md").read_text() == "# Q1\n"
    with pytest.raises(ToolError, match="exists; pass overwrite=true"):
        call(files["write_file"], path="reports/q1.md", content="other")
    assert call(files["write_file"], path="reports/q1.md", content="new", overwrite=True)["created"] is False
    assert (tmp_path / "reports" / "q1.md").read_text() == "new"


def test_a_workspace_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(NotADirectoryError):
        file_tools(tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        python_tool(tmp_path / "missing")


# -- run_python -------------------------------------------------------------------------------


def run(tool: Tool, code: str, stdin: str = ""):
    return call(tool, code=textwrap.dedent(code), stdin=stdin)


@needs_bwrap
def test_code_runs_in_the_workspace_and_returns_its_output(tmp_path):
    tool = python_tool(tmp_path)
    out = run(
        tool,
        """
        import sys
        print("sum", sum(range(10)))
        print("read", sys.stdin.read())
        with open("result.csv", "w") as f:
            f.write("a,b\\n1,2\\n")
    """,
        stdin="from the step",
    )
    assert out["stdout"] == "sum 45\nread from the step\n"
    assert out["exit_code"] == 0 and not out["timed_out"] and out["isolation"] == "bubblewrap"
    assert 0 < out["duration"] < 5
    assert (tmp_path / "result.csv").read_text() == "a,b\n1,2\n"


@needs_bwrap
def test_a_failing_program_is_reported_not_raised(tmp_path):
    tool = python_tool(tmp_path)
    crashed = run(tool, "x = 1\nraise ValueError('boom')\n")
    assert crashed["exit_code"] == 1 and not crashed["timed_out"]
    assert 'File "<run_python>", line 2' in crashed["stderr"] and "ValueError: boom" in crashed["stderr"]
    assert "raise ValueError('boom')" in crashed["stderr"]  # the source line is shown
    assert run(tool, "import sys; sys.exit(3)")["exit_code"] == 3


@needs_bwrap
def test_a_timeout_kills_the_program_and_the_child_it_forked(tmp_path):
    tool = python_tool(tmp_path, timeout=1.0)
    out = run(
        tool,
        """
        import os, time
        if os.fork() == 0:
            open("child-started.txt", "w").close()
            time.sleep(1.5)
            open("child-survived.txt", "w").close()
            os._exit(0)
        time.sleep(60)
    """,
    )
    assert out["timed_out"] and 1.0 <= out["duration"] < 4
    time.sleep(1.5)
    assert (tmp_path / "child-started.txt").exists() and not (tmp_path / "child-survived.txt").exists()


@needs_bwrap
def test_a_timeout_also_kills_a_child_that_left_the_process_group(tmp_path):
    tool = python_tool(tmp_path, timeout=1.0)
    out = run(
        tool,
        """
        import os, time
        if os.fork() == 0:
            os.setsid()  # escapes killpg(); only the PID namespace catches it
            open("child-started.txt", "w").close()
            time.sleep(1.5)
            open("child-survived.txt", "w").close()
            os._exit(0)
        time.sleep(60)
    """,
    )
    assert out["timed_out"]
    time.sleep(1.5)
    assert (tmp_path / "child-started.txt").exists() and not (tmp_path / "child-survived.txt").exists()


@needs_bwrap
def test_cancelling_the_call_kills_the_program(tmp_path):
    tool = python_tool(tmp_path, timeout=30)
    code = "import time\nopen('started.txt', 'w').close()\ntime.sleep(1.5)\nopen('still-running.txt', 'w').close()\n"

    async def cancelled():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(tool.invoke({"code": code}), 0.5)

    asyncio.run(cancelled())
    time.sleep(1.5)
    assert (tmp_path / "started.txt").exists() and not (tmp_path / "still-running.txt").exists()


@needs_bwrap
def test_a_memory_bomb_is_stopped(tmp_path):
    tool = python_tool(tmp_path, memory_mb=256, timeout=10)
    out = run(
        tool,
        """
        blocks = [bytearray(2**28) for _ in range(16)]  # 4 GiB in 256 MiB blocks, far past the limit
        print("allocated", len(blocks))
    """,
    )
    assert "allocated" not in out["stdout"] and "MemoryError" in out["stderr"]
    assert out["exit_code"] != 0 and not out["timed_out"]
    roomy = run(python_tool(tmp_path, memory_mb=1024), "b = bytearray(2**28); print('ok')")
    assert roomy["stdout"] == "ok\n"  # a 256 MiB block fits under a larger limit


@needs_bwrap
def test_output_is_bounded_with_a_marker(tmp_path):
    out = run(python_tool(tmp_path, max_output=1000), "print('x' * 100_000)")
    assert out["stdout"].startswith("x" * 1000) and out["truncated"]
    assert out["stdout"].endswith("[... 99001 more bytes truncated]")


@needs_bwrap
def test_the_program_sees_a_minimal_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANEXEC_TEST_SECRET", "hunter2")
    out = run(python_tool(tmp_path), "import os, sys; print(sorted(os.environ)); print(sys.flags.isolated)")
    assert "PLANEXEC_TEST_SECRET" not in out["stdout"] and "hunter2" not in out["stdout"]
    assert out["stdout"].splitlines() == ["['HOME', 'LANG', 'LC_ALL', 'MALLOC_ARENA_MAX', 'PATH']", "1"]


@needs_bwrap
def test_threads_fit_under_the_default_memory_limit(tmp_path):
    out = run(
        python_tool(tmp_path),
        """
        import threading, time
        threads = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(24)]
        for t in threads:
            t.start()
        print("started", len(threads))
    """,
    )
    assert out["stdout"] == "started 24\n", out["stderr"]


_CLIENT = """
import socket
def attempt(label, fn):
    try:
        fn()
        print(label, "CONNECTED")
    except OSError as exc:
        print(label, "BLOCKED", type(exc).__name__, exc)
attempt("loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3).close())
"""
_OUTSIDE = """
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
attempt("outside", lambda: socket.create_connection(("203.0.113.7", 80), timeout=3).close())
"""


@pytest.fixture
def server():
    """A TCP server on the host's loopback that accepts connections."""
    sock = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    yield sock.getsockname()[1], accepted
    sock.close()


@needs_bwrap
def test_the_program_has_no_network_even_to_loopback(tmp_path, server):
    port, accepted = server
    client = _CLIENT.format(port=port)
    # the control: the same client outside the sandbox reaches the server
    control = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=10, check=False)
    assert control.stdout == "loopback CONNECTED\n" and len(accepted) == 1
    out = run(python_tool(tmp_path), client + _OUTSIDE)
    lines = out["stdout"].splitlines()
    assert [line.split()[:2] for line in lines] == [["loopback", "BLOCKED"], ["dns", "BLOCKED"], ["outside", "BLOCKED"]]
    assert len(accepted) == 1


@needs_bwrap
def test_the_sandbox_cannot_list_network_devices_nor_start_a_networked_program(tmp_path, server):
    port, accepted = server
    out = run(
        python_tool(tmp_path),
        f"""
        import socket, subprocess, sys
        try:
            print(socket.if_nameindex())  # asks through a netlink socket, which the seccomp filter refuses
        except OSError as exc:
            print("if_nameindex refused", exc.errno)
        child = subprocess.run([sys.executable, "-c", {_CLIENT.format(port=port)!r}], capture_output=True, text=True)
        print(child.stdout.strip().split()[:2])
    """,
    )
    assert out["stdout"].splitlines() == ["if_nameindex refused 97", "['loopback', 'BLOCKED']"]  # EAFNOSUPPORT
    assert accepted == []


@needs_bwrap
def test_files_the_program_writes_are_bounded(tmp_path):
    tool = python_tool(tmp_path, max_file_mb=1)
    out = run(tool, "open('big.bin', 'wb').write(bytes(2 * 2**20))")
    assert "File too large" in out["stderr"] and out["exit_code"] == 1
    assert (tmp_path / "big.bin").stat().st_size <= 2**20


# -- calculator -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 // 2 + 7 % 2", 4),
        ("10 / 4", 2.5),
        ("-2 ** 2", -4),
        ("2 ** -1", 0.5),
        ("sqrt(16) + abs(-1)", 5.0),
        ("log(8, 2)", 3.0),
        ("round(pi, 3)", 3.142),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("sin(0) + cos(0) + e ** 0", 2.0),
        ("2 ** 64", 18446744073709551616),
        ("+".join(["1"] * 500), 500),  # 999 characters, 499 levels deep
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    result = call(calculator, expression=expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    ("expression", "part"),
    [
        ("x + 1", "unsupported name: 'x'"),
        ("__import__('os').system('true')", "unsupported function: \"__import__('os').system('true')\""),
        ("(1).real", "unsupported syntax (Attribute)"),
        ("open('f')", "unsupported function: \"open('f')\""),
        ("'a' * 3", "unsupported str constant: \"'a'\""),
        ("True + 1", "unsupported bool constant: 'True'"),
        ("[1, 2]", "unsupported syntax (List)"),
        ("1 < 2", "unsupported syntax (Compare)"),
        ("(lambda: 1)()", "unsupported function"),
        ("round(2.5, ndigits=1)", "keyword arguments are not supported"),
        ("1 +", "not a valid expression"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** 0.5", "complex number"),
        ("1e308 * 10", "not a finite number"),
        ("9 ** 9 ** 9", "9**387420489 is too large"),
        ("(10 ** 3000) ** 5", "too large"),
        ("1" * 2000, "the limit is 1000"),
        ("-" * 501 + "1", "nested more than 500 levels deep"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
    ],
)
def test_calculator_refuses_what_it_does_not_support(expression, part):
    with pytest.raises(ToolError) as info:
        call(calculator, expression=expression)
    assert part in str(info.value) and info.value.tool == "calculator"


def test_calculator_refuses_huge_powers_quickly():
    start = time.monotonic()
    with pytest.raises(ToolError):
        call(calculator, expression="9 ** 9 ** 9 ** 9")
    assert time.monotonic() - start < 1
    assert calculator.idempotent and calculator.name == "calculator"


def test_default_toolkit_holds_every_tool(tmp_path):
    names = [t.name for t in default_toolkit(tmp_path)]
    assert names == ["read_file", "list_files", "search_files", "write_file", "run_python", "calculator"]
