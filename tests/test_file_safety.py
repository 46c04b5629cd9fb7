"""The workspace file tools cannot be tricked out of the workspace: hard links, FIFOs, symlinks, races, odd names.

Each test here failed on the path-resolving implementation (check, then open by
path) and passes on the fd-walking one. Blocking calls run under a watchdog so
that a regression fails the test instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import time

import pytest

from planexec.errors import ToolError
from planexec.workers.toolkit import file_tools
from planexec.workers.tools import Tool

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file semantics")

SECRET = "SECRET-MARKER-7f3a"


def call(tool: Tool, **arguments):
    """Invoke a tool the way the engine does: checked arguments, JSON output."""
    return asyncio.run(tool.invoke(arguments))


def tools(workspace, **limits) -> dict[str, Tool]:
    return {t.name: t for t in file_tools(workspace, **limits)}


def unblock(fifo) -> None:
    """Release a thread stuck opening `fifo` for reading or for writing."""
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            fd = os.open(fifo, flags)
        except OSError:
            continue
        time.sleep(0.2)
        os.close(fd)


def promptly(fn, *args, seconds: float = 5.0, fifo=None, **kwargs):
    """`fn(*args, **kwargs)` in a watchdog thread: its result or its exception, or a failure if it blocks."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None:
            unblock(fifo)
        pytest.fail(f"still blocked after {seconds:g}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def refusal(fn, *args, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as info:
        promptly(fn, *args, **kwargs)
    return info.value


@pytest.fixture
def layout(tmp_path):
    """A workspace `ws` and, beside it, a directory `outside` holding a secret."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    return workspace, outside


# -- hard links --------------------------------------------------------------------------------


def test_a_hard_link_to_a_file_outside_can_be_neither_read_nor_written(layout):
    workspace, outside = layout
    os.link(outside / "secret.txt", workspace / "shadow")  # same file system: tmp_path holds both
    files = tools(workspace)
    error = refusal(call, files["read_file"], path="shadow")
    assert error.tool == "read_file" and error.problems[0].rule == "hard_link"
    assert "'shadow' has 2 hard links" in str(error) and SECRET not in str(error)
    for overwrite in (True, False):
        error = refusal(call, files["write_file"], path="shadow", content="pwned\n", overwrite=overwrite)
        assert error.problems[0].rule == ("hard_link" if overwrite else "exists")
    found = promptly(call, files["search_files"], query=SECRET)
    assert found["matches"] == [] and found["files_skipped"] == 1
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


# -- FIFOs and other special files -------------------------------------------------------------


def test_read_file_and_write_file_refuse_a_fifo_at_once(layout):
    workspace, _ = layout
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    files = tools(workspace)
    start = time.monotonic()
    error = refusal(call, files["read_file"], path="pipe", fifo=fifo)
    assert error.problems[0].rule == "not_regular_file"
    assert "'pipe' is a FIFO, not a regular file" in str(error)
    error = refusal(call, files["write_file"], path="pipe", content="x", overwrite=True, fifo=fifo)
    assert error.problems[0].rule == "not_regular_file"
    assert time.monotonic() - start < 2


def test_search_and_list_neither_block_on_a_fifo_nor_look_through_symlinks(layout):
    workspace, outside = layout
    os.mkfifo(workspace / "pipe")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "notes.txt").write_text("nothing to see\n")
    (workspace / "leak.txt").symlink_to(outside / "secret.txt")
    (workspace / "out").symlink_to(outside)
    (workspace / "alias").symlink_to(workspace / "sub")  # points inside, and is still not followed
    files = tools(workspace)
    found = promptly(call, files["search_files"], query=SECRET, fifo=workspace / "pipe")
    assert found["matches"] == [] and found["files_searched"] == 1
    assert SECRET not in str(promptly(call, files["search_files"], query="SECRET", regex=True, glob="**/*"))
    error = refusal(call, files["search_files"], query="x", path="pipe", fifo=workspace / "pipe")
    assert error.problems[0].rule == "not_regular_file"
    listing = promptly(call, files["list_files"], recursive=True)
    kinds = {e["path"]: e["kind"] for e in listing["entries"]}
    assert kinds == {"alias": "symlink", "leak.txt": "symlink", "out": "symlink", "pipe": "other", "sub": "dir", "sub/notes.txt": "file"}
    for path in ("alias", "out"):
        for name in ("list_files", "search_files"):
            arguments = {"path": path} if name == "list_files" else {"path": path, "query": "x"}
            assert refusal(call, files[name], **arguments).problems[0].rule == "symlink", (name, path)


# -- symlinks at any position ------------------------------------------------------------------

# ws/real/deeper/inner/f.txt, and symlinks that all point inside the workspace
PATHS = {  # position -> (path for read/search/write, path for list_files, the name reported as the symlink)
    "first": ("first/deeper/inner/f.txt", "first/deeper/inner", "'first' in"),
    "middle": ("real/mid/inner/f.txt", "real/mid/inner", "'real/mid' in"),
    "last": ("real/deeper/inner/last.txt", "real/deeper/lastdir", "is a symlink"),
}


@pytest.mark.parametrize("position", PATHS)
@pytest.mark.parametrize("name", ["read_file", "list_files", "search_files", "write_file"])
def test_a_symlink_at_any_position_is_refused_even_pointing_inside(layout, name, position):
    workspace, _ = layout
    inner = workspace / "real" / "deeper" / "inner"
    inner.mkdir(parents=True)
    (inner / "f.txt").write_text("original\n")
    (workspace / "first").symlink_to("real")
    (workspace / "real" / "mid").symlink_to("deeper")
    (inner / "last.txt").symlink_to("f.txt")
    (workspace / "real" / "deeper" / "lastdir").symlink_to("inner")
    file_path, dir_path, named = PATHS[position]
    arguments = {
        "read_file": {"path": file_path},
        "list_files": {"path": dir_path},
        "search_files": {"path": file_path, "query": "original"},
        "write_file": {"path": file_path, "content": "changed\n", "overwrite": True},
    }[name]
    error = refusal(call, tools(workspace)[name], **arguments)
    assert error.tool == name and error.problems[0].rule == "symlink"
    assert named in str(error) and repr(arguments["path"]) in str(error) and str(workspace) in str(error)
    assert (inner / "f.txt").read_text() == "original\n"


# -- odd names ---------------------------------------------------------------------------------

BAD_PATHS = [
    ("..", "outside_workspace"),
    ("sub/../../outside/secret.txt", "outside_workspace"),
    ("/etc/passwd", "absolute_path"),
    ("a\0b.txt", "bad_path"),
    ("x" * 2000, "name_too_long"),
    ("sub/" + "y" * 256, "name_too_long"),
    ("d/" * 2100 + "f", "name_too_long"),  # short names, a path over 4096 bytes
]


@pytest.mark.parametrize("name", ["read_file", "list_files", "search_files", "write_file"])
def test_dot_dot_absolute_nul_and_over_long_paths_are_refused_with_a_short_message(layout, name):
    workspace, outside = layout
    (workspace / "sub").mkdir()
    files = tools(workspace)
    for path, rule in BAD_PATHS:
        arguments = {"path": path, "query": "x"} if name == "search_files" else {"path": path}
        if name == "write_file":
            arguments.update(content="pwned\n", overwrite=True)
        error = refusal(call, files[name], **arguments)
        message = str(error)
        assert error.tool == name and error.problems[0].rule == rule, (path[:20], message)
        assert len(message) < 400 and "Errno" not in message, message
        if len(path) > 120:
            assert f"({len(path)} characters)" in message
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


# -- time bounds -------------------------------------------------------------------------------


def test_reads_and_searches_stop_at_the_deadline(layout):
    workspace, _ = layout
    (workspace / "big.txt").write_text("".join(f"line {n}\n" for n in range(200_000)))
    files = tools(workspace, max_read_seconds=0)
    error = refusal(call, files["read_file"], path="big.txt", start_line=190_000)
    assert error.problems[0].rule == "read_timeout" and "took over 0s" in str(error)
    found = promptly(call, files["search_files"], query="line 199999")
    assert found["truncated"] and "stopped after 0s" in found["note"] and not found["matches"]


# -- races -------------------------------------------------------------------------------------


def _exchanger():
    """A function swapping two paths atomically (renameat2 RENAME_EXCHANGE), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def exchange(a, b) -> None:
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    return exchange


@pytest.fixture
def swapping(layout):
    """A thread that keeps swapping `ws/sub` (a directory) and a symlink to `outside`, atomically."""
    exchange = _exchanger()
    if exchange is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available")
    workspace, outside = layout
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("public\n")
    (outside / "f.txt").write_text(f"{SECRET}\n")
    (workspace / "link").symlink_to(outside)
    stop, swaps = threading.Event(), [0]

    def swap() -> None:
        while not stop.is_set():
            exchange(workspace / "sub", workspace / "link")
            swaps[0] += 1

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    yield workspace, outside, swaps
    stop.set()
    thread.join(5)


def test_swapping_a_directory_for_a_symlink_never_lets_read_file_out(swapping):
    workspace, _, swaps = swapping
    read = tools(workspace)["read_file"].fn
    reads = escapes = refused = 0
    deadline = time.monotonic() + 8
    while reads < 5000 and time.monotonic() < deadline:
        reads += 1
        try:
            text = read("sub/f.txt").text
        except ToolError:
            refused += 1
            continue
        escapes += SECRET in text
    print(f"read_file race: {reads} reads, {escapes} escapes, {refused} refused, {swaps[0]} swaps")
    assert escapes == 0
    assert refused and reads - refused and swaps[0] > 100  # both states were met: the race did run


def test_swapping_a_directory_for_a_symlink_never_lets_write_file_out(swapping):
    workspace, outside, swaps = swapping
    write = tools(workspace)["write_file"].fn
    writes = refused = 0
    deadline = time.monotonic() + 8
    while writes < 5000 and time.monotonic() < deadline:
        writes += 2
        for arguments in ({"path": "sub/f.txt", "overwrite": True}, {"path": f"sub/new-{writes}.txt"}):
            try:
                write(content="written\n", **arguments)
            except ToolError:
                refused += 1
    print(f"write_file race: {writes} writes, {refused} refused, {swaps[0]} swaps")
    assert (outside / "f.txt").read_text() == f"{SECRET}\n"
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt", "secret.txt"]
    assert refused and swaps[0] > 100  # the race did run (most writes meet the symlink: they make more syscalls)
