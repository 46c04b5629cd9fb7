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
NEEDS_AN_EXTRA = ("planexec.web", "planexec.mcp_server")


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
