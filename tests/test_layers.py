"""The package's import graph: no cycle anywhere, counting imports inside functions and under TYPE_CHECKING."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import grimp
import pytest

import planexec

SRC = Path(planexec.__file__).parent


def test_the_import_graph_of_planexec_has_no_cycle():
    graph = grimp.build_graph("planexec")  # every import: module level, in functions, under TYPE_CHECKING
    sorter = graphlib.TopologicalSorter({m: graph.find_modules_directly_imported_by(m) for m in graph.modules})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


# subpackages of ours that need an extra to import (their modules import its SDKs at the top): a face loads one
# inside the command that needs it, so the rest of the CLI works without the extra
NEEDS_AN_EXTRA = ("planexec.web", "planexec.mcp_server", "planexec.a2a_server")


def test_no_import_inside_a_function_except_optional_dependencies():
    """An import inside a function may load an optional SDK (with its install hint), or a subpackage of ours that
    needs an extra, never another module of ours."""
    inner = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                relative = isinstance(node, ast.ImportFrom) and node.level > 0
                ours = [n for n in names if n == "planexec" or n.startswith("planexec.")]
                optional = [n for n in ours if n in NEEDS_AN_EXTRA or n.startswith(tuple(f"{e}." for e in NEEDS_AN_EXTRA))]
                if relative or len(ours) > len(optional):
                    inner.append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    assert inner == []


def _architecture_rows() -> dict[str, tuple[int, str]]:
    """docs/architecture.md's layer table: the first backticked name of each row -> (layer, the row's text)."""
    import re

    text = (SRC.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| (\d+) \| (.*?) \| (.*) \|$", line)
        if m:
            for name in re.findall(r"`([a-z0-9_]+)(?:/|\.py)`", m.group(2)):
                rows[name] = (int(m.group(1)), m.group(3))
    return rows


def test_the_architecture_page_draws_every_package_and_module_in_its_layer():
    """Each package and top-level module of planexec has a row in docs/architecture.md, in the layer import-linter checks,
    and each module of a package is named in its package's row (a new module cannot be left off the map)."""
    import tomllib

    rows = _architecture_rows()
    config = tomllib.loads((SRC.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    expected = {name.strip(): n for n, layer in enumerate(layers, 1) for name in layer.split("|")}
    for name, layer in expected.items():
        assert name in rows, f"docs/architecture.md has no row for {name}"
        assert rows[name][0] == layer, f"docs/architecture.md puts {name} in layer {rows[name][0]}; import-linter in {layer}"
    packages = [p for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    modules = [p.stem for p in SRC.glob("*.py") if not p.stem.startswith("_")]
    for name in [p.name for p in packages] + modules:
        assert name in rows or name in ("events", "policies", "stages", "runs"), f"docs/architecture.md does not draw planexec.{name}"
    for package in packages:
        row = rows[package.name][1]
        for module in sorted(package.glob("*.py")):
            if module.stem != "__init__":
                assert f"`{module.stem}`" in row, f"docs/architecture.md's {package.name}/ row does not name {module.stem}"


def test_governance_does_no_terminal_io():
    """Review decides; showing a plan and asking a person are a face's (the terminal review is `cli.review_terminal`)."""
    forbidden = {"rich", "subprocess", "tempfile", "readline", "getpass", "termios", "tty"}
    for path in sorted((SRC / "governance").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad = {n.split(".")[0] for n in names} & forbidden
                assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}: terminal I/O belongs to a face"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("input", "print"):
                raise AssertionError(f"{path.relative_to(SRC)}:{node.lineno} calls {node.func.id}(): terminal I/O belongs to a face")


def test_only_the_team_and_its_saved_plan_seam_build_an_engine():
    """A goal goes through `Team`; a plan file, a template, a resumed or a queued run through `fleet.saved`: no face,
    evaluation or other module calls `Engine(...)` itself, so every run gets the same settings the same way."""
    builders = set()
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Engine":
                builders.add(str(path.relative_to(SRC)))
    assert builders <= {"team/team.py", "fleet/saved.py", "team/agent.py", "team/subteam.py", "engine/engine.py"}, builders
    assert "fleet/saved.py" in builders and "team/team.py" in builders


def test_the_faces_contract_forbids_every_private_module():
    """The CLI, the web console and the MCP server import only the public API: import-linter forbids every other module, and this
    keeps the list whole (a new private module is forbidden too, or the test names it)."""
    import tomllib

    config = tomllib.loads((SRC.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "forbidden"]
    assert set(contract["source_modules"]) == {"planexec.cli", "planexec.web", "planexec.mcp_server", "planexec.a2a_server"}
    forbidden = set(contract["forbidden_modules"])
    public = {"planexec", "planexec.events", "planexec.errors", "planexec.policies", "planexec.store", "planexec.testing",
              "planexec.stages", "planexec.runs", "planexec.plan", "planexec.library", "planexec.fleet", "planexec.models",
              "planexec.config", "planexec.telemetry", "planexec.scale", "planexec.eval"}  # fmt: skip
    faces = {"planexec.cli", "planexec.web", "planexec.mcp_server", "planexec.a2a_server"}
    graph = grimp.build_graph("planexec")
    for module in sorted(graph.modules):
        if module in public or any(module == f or module.startswith(f + ".") for f in faces):
            continue
        covered = any(module == f or module.startswith(f + ".") for f in forbidden)
        assert covered, f"{module} is neither public nor forbidden to the faces: add it to the forbidden contract in pyproject.toml"
    for name in forbidden:
        assert name not in public, f"{name} is public: the faces may import it"
