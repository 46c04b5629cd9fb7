"""A store that cannot be written is a clean error, exit 3, never a traceback.

Root ignores a file's permission bits, so the store is made unwritable the ways that stop root too: the immutable
flag (``chattr +i``) on the database file or on an empty folder, and a read-only bind mount of its folder. Each test
is skipped, with the reason, where the file system or the user cannot do that.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from planexec.cli.main import main

TOOLS = '''
from planexec import tool


@tool
def greet(name: str) -> str:
    """Say hello."""
    return "hello " + name
'''
PLAN = {"plan_id": "hello", "goal": "greet", "steps": [{"id": "a", "action": "greet", "worker": "tool", "parameters": {"name": "Ada"}}]}
HINT = "the store cannot be written"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "greetings.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    assert main(["run", "--plan", "plan.json", "--tools", "greetings.py", "--yes", "--store", "store/runs.db", "--run-id", "r0"]) == 0
    return tmp_path


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """`path` with the immutable flag set (even root cannot change it); skips where chattr cannot set it."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr on this machine")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is refused here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@contextlib.contextmanager
def read_only_mount(folder: Path, at: Path) -> Iterator[None]:
    """`folder` bind-mounted read-only at `at`; skips where this user cannot mount."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only bind mount needs root and mount")
    at.mkdir()
    done = subprocess.run(["mount", "--bind", str(folder), str(at)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(at)], capture_output=True, text=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remounted.stderr.strip()}")
        yield
    finally:
        # busy when this process still holds a file there: a store that failed to open must close what it opened
        busy = subprocess.run(["umount", str(at)], capture_output=True, text=True)
        if busy.returncode != 0:
            subprocess.run(["umount", "-l", str(at)], check=True)  # never leave the mount behind
            raise AssertionError(f"the store kept a file open on the mount: {busy.stderr.strip()}")


def run(store: str, run_id: str, capsys) -> tuple[int, str]:
    code = main(["run", "--plan", "plan.json", "--tools", "greetings.py", "--yes", "--store", store, "--run-id", run_id])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def assert_clean_refusal(code: int, text: str, store: str) -> None:
    assert code == 3, text
    assert "Traceback" not in text and "planexec: error: cannot " in text and store in text and HINT in text


def test_an_immutable_store_file_is_a_clean_error_exit_3(project, capsys):
    capsys.readouterr()
    with immutable(project / "store" / "runs.db"):
        code, text = run("store/runs.db", "r1", capsys)
    assert_clean_refusal(code, text, "store/runs.db")
    assert "hello Ada" not in text  # nothing ran: the run could not be recorded


def test_a_new_store_in_an_immutable_folder_is_a_clean_error_exit_3(project, capsys):
    (project / "locked").mkdir()
    capsys.readouterr()
    with immutable(project / "locked"):
        code, text = run("locked/runs.db", "r2", capsys)
    assert_clean_refusal(code, text, "locked/runs.db")


def test_a_store_on_a_read_only_mount_is_a_clean_error_exit_3_for_run_and_other_writing_commands(project, capsys):
    capsys.readouterr()
    with read_only_mount(project / "store", project / "ro"):
        code, text = run("ro/runs.db", "r3", capsys)
        assert_clean_refusal(code, text, "ro/runs.db")
        code = main(["submit", "plan.json", "--tools", "greetings.py", "--yes", "--store", "ro/runs.db"])
        printed = capsys.readouterr()
        assert code == 3 and "Traceback" not in printed.out + printed.err and HINT in printed.err
