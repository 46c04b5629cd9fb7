"""Tools of the investigate example: a failing test found, explained from the code and the docs, fixed after approval.

The example works on a copy of ``examples/investigate/project`` (the checked-in
files are never changed): ``checkout_project`` copies it into the workspace,
``$INVESTIGATE_WORKSPACE`` (default ``workspace/investigate``, beside the
CLI's own ``workspace``). The other tools work on that copy:

- ``run_tests`` runs the project's unittest suite in planexec's sandbox
  (``run_python``: bubblewrap, no network, the copy mounted read-only);
- ``read_source`` and ``search_docs`` read the code and the docs (read-only,
  their output is outside text: whoever reads it is quarantined);
- ``apply_patch`` applies a unified diff to the copy. It changes files, so it
  requires approval, and its ``diff`` is sensitive: a diff written from
  untrusted text (a traceback, the code) is applied only when a person says
  so, never under ``--yes``. A diff that leaves the project, touches a file
  that does not exist or does not match the code is refused whole, nothing
  written.

    planexec run --plan examples/investigate/plan.json --tools examples/investigate/tools.py
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel

from planexec import ToolContext, tool
from planexec.errors import ToolError
from planexec.workers.toolkit import python_tool
from planexec.workers.tools import predicate

PROJECT = Path(__file__).resolve().parent / "project"

# what runs in the sandbox: the project's unittest suite, verbose, nothing written (the copy is read-only there)
TEST_PROGRAM = """\
import sys, unittest
sys.dont_write_bytecode = True
sys.path.insert(0, ".")
suite = unittest.defaultTestLoader.discover("tests", top_level_dir=".")
result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
"""


def workspace() -> Path:
    """The folder the copy of the project lives in (``$INVESTIGATE_WORKSPACE``, default ``workspace/investigate``)."""
    return Path(os.environ.get("INVESTIGATE_WORKSPACE", "workspace/investigate")).resolve()


def copy_root() -> Path:
    """The copy of the project the tools work on."""
    return workspace() / "project"


def _who(context: ToolContext[Any]) -> str:
    return f"step {context.step_id!r}" if context.step_id else f"tool {context.tool!r}"


def _inside(relative: str, root: Path, *, field_name: str, context: ToolContext[Any]) -> Path:
    """`relative` resolved in `root`; `ToolError` naming the step and the field when it leaves it."""
    pure = PurePosixPath(relative)
    target = (root / pure).resolve()
    if "\\" in relative or pure.is_absolute() or ".." in pure.parts or not target.is_relative_to(root):
        raise ToolError(f"{_who(context)}: {field_name} {relative!r} is outside the project", tool=context.tool)
    return target


class Checkout(BaseModel):
    """Where the copy of the project is and what it holds."""

    root: str
    files: list[str]


class TestRun(BaseModel):
    """The project's tests, as the sandbox ran them."""

    passed: bool
    exit_code: int | None
    tests_run: int
    failures: list[str]
    output: str


class SourceFile(BaseModel):
    """A file of the project, with numbered lines."""

    path: str
    text: str


class DocMatch(BaseModel):
    """A section of the docs that mentions the query: its file, first line and text."""

    path: str
    line: int
    text: str


class PatchApplied(BaseModel):
    """What `apply_patch` changed."""

    files: list[str]
    hunks: int


@tool(idempotent=True, untrusted_output=False)
def checkout_project() -> Checkout:
    """Copy the example's project into the workspace, replacing an earlier copy (the checked-in files stay as they are)."""
    root = copy_root()
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return Checkout(root=str(root), files=files)


@tool(read_only=True)
async def run_tests(context: ToolContext[Any]) -> TestRun:
    """Run the project's unittest suite in the sandbox; report whether it passed, the failing tests and the output."""
    root = copy_root()
    if not root.is_dir():
        raise ToolError(f"{_who(context)}: no copy of the project at {root}; run checkout_project first", tool=context.tool)
    sandbox = python_tool(root, writable=False, timeout=60)
    run = await sandbox.fn(code=TEST_PROGRAM, context=context, stdin="")
    output = run.stdout + run.stderr
    failures = re.findall(r"^(?:FAIL|ERROR): (\w+)", output, flags=re.MULTILINE)
    ran = re.search(r"^Ran (\d+) tests?", output, flags=re.MULTILINE)
    return TestRun(
        passed=run.exit_code == 0, exit_code=run.exit_code, tests_run=int(ran.group(1)) if ran else 0, failures=failures, output=output
    )


@tool(read_only=True, sensitive=("path",))
def read_source(path: str, context: ToolContext[Any]) -> SourceFile:
    """Read a file of the project (a path relative to its root), with numbered lines."""
    target = _inside(path, copy_root(), field_name="path", context=context)
    if not target.is_file():
        raise ToolError(f"{_who(context)}: path {path!r} is not a file of the project", tool=context.tool)
    lines = target.read_text(encoding="utf-8").splitlines()
    return SourceFile(path=path, text="\n".join(f"{n:4} {line}" for n, line in enumerate(lines, 1)))


@tool(read_only=True)
def search_docs(query: str, context: ToolContext[Any]) -> list[DocMatch]:
    """The sections of the project's docs (docs/*.md, split at their headings) that mention every word of the query."""
    words = [w.lower() for w in re.findall(r"\w+", query)]
    if not words:
        raise ToolError(f"{_who(context)}: query {query!r} has no words to search for", tool=context.tool)
    matches = []
    for doc in sorted((copy_root() / "docs").glob("*.md")):
        lines = doc.read_text(encoding="utf-8").splitlines()
        starts = sorted({0, *(n for n, line in enumerate(lines) if line.startswith("#"))})  # the text before a first heading too
        for start, end in zip(starts, [*starts[1:], len(lines)]):
            section = " ".join(line.strip() for line in lines[start:end] if line.strip())
            if section and all(w in section.lower() for w in words):
                matches.append(DocMatch(path=doc.relative_to(copy_root()).as_posix(), line=start + 1, text=section))
    return matches


# --- unified diffs ----------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class _Hunk:
    start: int  # 1-based line of the old file
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


@dataclass
class _FilePatch:
    path: str
    hunks: list[_Hunk] = field(default_factory=list)


def _strip_prefix(name: str) -> str:
    name = name.split("\t")[0].strip()
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse_diff(diff: str, *, who: str, tool_name: str) -> list[_FilePatch]:
    """The files and hunks of a unified diff; `ToolError` naming the line that is not one."""
    patches: list[_FilePatch] = []
    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- "):
            if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
                raise ToolError(f"{who}: diff line {i + 1}: '---' is not followed by a '+++' line", tool=tool_name)
            old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
            if old != new:
                raise ToolError(f"{who}: diff line {i + 1}: renames and new files are not applied ({old!r} -> {new!r})", tool=tool_name)
            patches.append(_FilePatch(new))
            i += 2
            continue
        found = _HUNK.match(line)
        if found:
            if not patches:
                raise ToolError(f"{who}: diff line {i + 1}: a hunk before any '---'/'+++' file header", tool=tool_name)
            hunk = _Hunk(int(found.group(1)))
            old_left = int(found.group(2) or 1)
            new_left = int(found.group(4) or 1)
            i += 1
            while i < len(lines) and (old_left > 0 or new_left > 0):
                body = lines[i]
                tag, text = (body[:1], body[1:]) if body else (" ", "")
                if tag == " ":
                    hunk.old.append(text)
                    hunk.new.append(text)
                    old_left, new_left = old_left - 1, new_left - 1
                elif tag == "-":
                    hunk.old.append(text)
                    old_left -= 1
                elif tag == "+":
                    hunk.new.append(text)
                    new_left -= 1
                elif tag != "\\":  # "\ No newline at end of file"
                    raise ToolError(f"{who}: diff line {i + 1}: {body!r} is not a context, '-' or '+' line", tool=tool_name)
                i += 1
            if old_left or new_left:
                raise ToolError(
                    f"{who}: diff ends inside the hunk at line {found.group(0)!r}: its line counts do not match", tool=tool_name
                )
            patches[-1].hunks.append(hunk)
            continue
        i += 1  # "diff --git", "index ..." and other headers
    if not patches or not any(p.hunks for p in patches):
        raise ToolError(f"{who}: diff has no hunk to apply (expected '--- a/FILE', '+++ b/FILE', '@@ ... @@' lines)", tool=tool_name)
    return patches


def _patched(text: str, patch: _FilePatch, *, who: str, tool_name: str) -> str:
    """The text with the patch's hunks applied at their exact lines; `ToolError` when the old lines are not there."""
    lines = text.splitlines()
    out: list[str] = []
    at = 0  # 0-based index in `lines` already copied
    for hunk in patch.hunks:
        start = hunk.start - 1 if hunk.old else hunk.start  # a pure insertion counts the line it follows
        if start < at or lines[start : start + len(hunk.old)] != hunk.old:
            raise ToolError(f"{who}: the hunk at line {hunk.start} of {patch.path!r} does not match the file", tool=tool_name)
        out.extend(lines[at:start])
        out.extend(hunk.new)
        at = start + len(hunk.old)
    out.extend(lines[at:])
    return "\n".join(out) + ("\n" if text.endswith("\n") or not text else "")


@tool(requires_approval=True, sensitive=("diff",), untrusted_output=False)
def apply_patch(diff: str, context: ToolContext[Any]) -> PatchApplied:
    """Apply a unified diff (paths relative to the project, with or without a/ b/ prefixes) to the copy of the project.

    All or nothing: every file and hunk is checked before one is written.
    """
    who, name = _who(context), context.tool
    root = copy_root()
    patches = parse_diff(diff, who=who, tool_name=name)
    results: dict[Path, str] = {}
    for patch in patches:
        target = _inside(patch.path, root, field_name="diff file", context=context)
        if not target.is_file():
            raise ToolError(f"{who}: diff file {patch.path!r} is not a file of the project", tool=name)
        results[target] = _patched(results.get(target) or target.read_text(encoding="utf-8"), patch, who=who, tool_name=name)
    for target, text in results.items():
        target.write_text(text, encoding="utf-8")
    return PatchApplied(files=sorted(p.relative_to(root).as_posix() for p in results), hunks=sum(len(p.hunks) for p in patches))


@predicate
def tests_pass(report: dict[str, Any]) -> tuple[bool, str]:
    """Every test of the project passed."""
    failures = report.get("failures") or []
    return bool(report.get("passed")), f"{len(failures)} failing: {', '.join(failures)}" if failures else "the suite did not pass"
