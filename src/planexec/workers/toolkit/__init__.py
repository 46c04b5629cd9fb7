"""Built-in tools for role workers: workspace files, a sandboxed Python runner, a calculator.

Owns `default_toolkit`, which gathers them, `check_tools` (the read-only
twins a critic checks with), and re-exports the pieces:
`file_tools` (``read_file``, ``list_files``, ``search_files``, ``write_file``),
`python_tool` (``run_python``) and `calculator`. Every tool that touches the
disk is bound to one workspace directory. Imports `planexec.workers.tools`,
`planexec.errors`, the stdlib and pydantic only (through its modules).

    worker = RoleWorker("analyst", model=model, description="...", system_prompt="...",
                        tools=default_toolkit("work"))
"""

from __future__ import annotations

from pathlib import Path

from planexec.workers.toolkit.calculator import calculator
from planexec.workers.toolkit.files import (
    FileEntry,
    FileListing,
    FileText,
    FileWritten,
    SearchMatch,
    SearchResults,
    file_tools,
)
from planexec.workers.toolkit.sandbox import PythonRun, python_tool, sandbox_available
from planexec.workers.tools import Tool

__all__ = [
    "FileEntry",
    "FileListing",
    "FileText",
    "FileWritten",
    "PythonRun",
    "SearchMatch",
    "SearchResults",
    "calculator",
    "check_tools",
    "default_toolkit",
    "file_tools",
    "python_tool",
    "sandbox_available",
]


def check_tools(workspace: str | Path) -> list[Tool]:
    """Read-only twins of the toolkit's tools, for critics: ``run_python`` on a read-only workspace."""
    return [python_tool(workspace, writable=False)]


def default_toolkit(workspace: str | Path) -> list[Tool]:
    """Every built-in tool with default limits: the file tools and `run_python` bound to `workspace`, and `calculator`."""
    return [*file_tools(workspace), python_tool(workspace), calculator]
