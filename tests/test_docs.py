"""Every ```python block of README.md and docs/**/*.md runs, and the mkdocs site builds with ``--strict``.

A block runs on its own (no state shared with the blocks before it), in a
fresh temporary working directory, with the ``PLANEXEC_*`` and provider key
variables unset. Real model calls stay blocked as in the rest of the suite:
every model provider (``local``, ``openai``, ``anthropic``, ...) is replaced
by one that makes `planexec.testing.ScriptedModel`s. By default they have no
answers, so a block that calls a model fails with `ScriptExhaustedError`. A
block that needs a model says what the model answers in an HTML comment
right before it (invisible on GitHub and on the site)::

    <!-- test
    model: {"decompose": true, "reason": "one tool call"}
    model: {"steps": [...]}
    prints: 42
    -->

Each ``model:`` line is one answer, in the order the calls come, shared by
every model the block makes; each must be used. ``prints:`` is what the
block must print (stripped). Blocks fenced as anything but ``python`` (shell,
toml, json, yaml, output) are not run.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from planexec.models import providers
from planexec.testing import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"<!--\s*test\b(?P<body>.*?)-->\s*\Z", re.S)


@dataclass
class Block:
    """One ```python block: where it is, its code, and what its marker scripts."""

    path: Path
    line: int
    code: str
    answers: list[str] = field(default_factory=list)
    prints: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def _marker(before: list[str]) -> tuple[list[str], str | None]:
    """The answers and expected output of a ``<!-- test ... -->`` comment ending just above a block."""
    text = "\n".join(before).rstrip()
    start = text.rfind("<!--")
    m = MARKER.search(text[start:]) if start >= 0 else None
    if m is None:
        return [], None
    answers: list[str] = []
    prints = None
    for raw in m.group("body").splitlines():
        line = raw.strip()
        if line.startswith("model:"):
            answers.append(line[len("model:") :].strip())
        elif line.startswith("prints:"):
            prints = line[len("prints:") :].strip()
        elif line:
            raise ValueError(f"a test marker line must start with 'model:' or 'prints:', not {line!r}")
    return answers, prints


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, each with the line its fence opens on (1-based)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, indent = i, len(m.group("indent"))
        i += 1
        body: list[str] = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1  # the closing fence
        if m.group("lang") == "python":
            answers, prints = _marker(lines[max(0, start - 30) : start])
            blocks.append(Block(path, start + 1, "\n".join(body) + "\n", answers, prints))
    return blocks


def doc_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


BLOCKS = [block for path in doc_files() for block in python_blocks(path)]


@pytest.fixture
def scripted_providers(monkeypatch, tmp_path):
    """Every provider makes ScriptedModels answering from one shared queue; a fresh working directory."""
    queue: list[str] = []

    def factory_for(provider: str):
        def factory(model, options):
            scripted = ScriptedModel([], name=f"{provider}:{model}")
            scripted.answers = queue  # one queue for every model the block makes, in call order
            return scripted

        return factory

    for name in providers.provider_names():
        monkeypatch.setitem(providers._registered, name, factory_for(name))
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("PLANEXEC_") or key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            monkeypatch.delenv(key)
    return queue


def test_the_docs_have_python_blocks_and_the_readme_has_the_first_program():
    readme = [b for b in BLOCKS if b.path.name == "README.md"]
    assert any("from planexec import Team" in b.code for b in readme)
    assert len({b.path for b in BLOCKS}) > 3


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_python_block_runs(block: Block, scripted_providers):
    scripted_providers.extend(block.answers)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, block.id, "exec"), {"__name__": "__docs__"})
    assert scripted_providers == [], f"{block.id}: the marker scripts answers the block never asked for: {scripted_providers}"
    if block.prints is not None:
        assert out.getvalue().strip() == block.prints


def test_a_marker_is_read_from_the_comment_right_above_a_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        'Text.\n\n<!-- test\nmodel: {"a": 1}\nmodel: hello\nprints: 42\n-->\n```python\nprint(42)\n```\n\n```python\nx = 1\n```\n'
    )
    first, second = python_blocks(page)
    assert (first.line, first.answers, first.prints, first.code) == (8, ['{"a": 1}', "hello"], "42", "print(42)\n")
    assert (second.answers, second.prints) == ([], None)


def test_the_site_builds_strict(tmp_path):
    if shutil.which("mkdocs") is None:
        pytest.importorskip("mkdocs", reason="needs mkdocs-material (pip install -e '.[dev]')")
    pytest.importorskip("material", reason="needs mkdocs-material (pip install -e '.[dev]')")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
