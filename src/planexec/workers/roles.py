"""The built-in roles: researcher, coder, critic and writer.

Owns `RoleSpec` (a role's name, the description the planner reads, the
tools it selects by name and its task names), `ROLES`, `role_prompt` and
`builtin_roles`, which builds the roles as `RoleWorker`s (the critic as a
`CriticWorker`), each with its own model if given. System prompts are data
files, ``prompts/roles/<role>.md``. Imports `workers`, `tools`,
`toolcalls`, `errors` and `models.base`; the toolkit only when no tools are
given (its `default_toolkit(workspace)` is the default tool source).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planexec.errors import RegistryError
from planexec.models.base import Model
from planexec.workers.tool_calls import prompt_file
from planexec.workers.toolkit import check_tools, default_toolkit
from planexec.workers.tools import Tool
from planexec.workers.worker import MAX_RESULT_CHARS, CriticWorker, RoleWorker

__all__ = ["ROLES", "RoleSpec", "builtin_roles", "role_prompt"]


@dataclass(frozen=True)
class RoleSpec:
    """A built-in role: what the planner reads about it, the tools it takes by name, its tasks.

    `tasks` are the free-form actions a plan step may name (the model works
    them); `critic` makes it a `CriticWorker`, answering with a `Verdict`.
    """

    name: str
    description: str
    tools: tuple[str, ...]
    tasks: tuple[str, ...]
    critic: bool = False

    def build(
        self,
        model: Model,
        tools: Mapping[str, Tool],
        *,
        max_turns: int = 8,
        checks: Mapping[str, Tool] | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> RoleWorker:
        """The role as a worker, with the tools of `tools` it names (missing ones are left out).

        A critic takes the read-only twin in `checks` of a tool it names, when
        there is one: it checks work, it does not change it.
        """
        twins = (checks or {}) if self.critic else {}
        chosen = [twins.get(name) or tools[name] for name in self.tools if name in tools]
        names = ", ".join(t.name for t in chosen) or "none"
        options: dict[str, Any] = {
            "model": model,
            "description": f"{self.description} Tools: {names}.",
            "system_prompt": role_prompt(self.name),
            "tools": chosen,
            "tasks": self.tasks,
            "max_turns": max_turns,
            "max_result_chars": max_result_chars,
        }
        if self.critic:
            if not chosen:
                raise RegistryError(
                    f"role {self.name!r} needs at least one of the tools {', '.join(self.tools)}: "
                    "its approvals count only after a tool check",
                    name=self.name,
                )
            return CriticWorker(self.name, **options)
        return RoleWorker(self.name, **options)


ROLES: tuple[RoleSpec, ...] = (
    RoleSpec(
        "researcher",
        "Finds facts: lists, searches and reads the workspace's files and computes with a calculator; read-only. "
        "Answers with its findings and where they came from.",
        tools=("read_file", "list_files", "search_files", "calculator"),
        tasks=("research", "respond"),
    ),
    RoleSpec(
        "coder",
        "Writes and runs Python code (sandboxed) and reads and writes workspace files; each file write and code run "
        "is approved unless the step grants it. Answers with what it did and the result.",
        tools=("run_python", "read_file", "list_files", "write_file"),
        tasks=("code", "respond"),
    ),
    RoleSpec(
        "critic",
        "Reviews the work of earlier steps by checking it with tools (running code, recomputing, reading files). "
        'Answers with a verdict {"approved", "reasons", "judged", "tools_used"}; an approval given without a tool '
        "check is recorded as approved: false, judged: false.",
        tools=("run_python", "read_file", "calculator"),
        tasks=("review", "respond"),
        critic=True,
    ),
    RoleSpec(
        "writer",
        "Turns its input and the results of earlier steps into finished text (an answer, a poem, a summary, "
        "a report); uses no tools. Answers with the text only.",
        tools=(),
        tasks=("write", "respond"),
    ),
)

_BY_NAME = {spec.name: spec for spec in ROLES}


def role_prompt(role: str) -> str:
    """The system prompt of a built-in role, read from ``prompts/roles/<role>.md``."""
    if role not in _BY_NAME:
        raise RegistryError(f"no built-in role {role!r}; known: {', '.join(_BY_NAME)}", name=role)
    return prompt_file("roles", f"{role}.md")


def _default_tools(workspace: str | Path | None) -> list[Tool]:
    if workspace is None:
        raise RegistryError("builtin_roles needs a workspace for its default tools, or tools=", name="workspace")
    return list(default_toolkit(workspace))


def builtin_roles(
    model: Model,
    *,
    workspace: str | Path | None = None,
    models: Mapping[str, Model] | None = None,
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    roles: Iterable[str] | None = None,
    max_turns: int = 8,
    checks: Iterable[Tool] | None = None,
    max_result_chars: int = MAX_RESULT_CHARS,
) -> list[RoleWorker]:
    """The built-in roles as workers, ready for `Registry.add_worker`.

    Every role uses `model` unless `models` names another for it (a strong
    planner, cheap workers: ``models={"critic": strong}``). Each role takes
    the tools it names from `tools` (a list or a name → tool mapping, such
    as ``registry.tools``); without `tools`, from
    ``planexec.workers.toolkit.default_toolkit(workspace)``. A role whose tools are
    missing gets the ones that are there; the critic needs at least one.
    `roles` picks a subset, by name, in that order. The critic checks with
    the read-only twins in `checks` (by default, with a workspace,
    `planexec.workers.toolkit.check_tools`): its ``run_python`` sees the
    workspace read-only. A tool result longer than `max_result_chars` is
    cut before a role's model reads it (see `RoleWorker`).
    """
    names = list(roles) if roles is not None else [spec.name for spec in ROLES]
    unknown = sorted({*names, *(models or {})} - set(_BY_NAME))
    if unknown:
        raise RegistryError(f"no built-in role {', '.join(map(repr, unknown))}; known: {', '.join(_BY_NAME)}", name=unknown[0])
    source = tools if tools is not None else _default_tools(workspace)
    available = dict(source) if isinstance(source, Mapping) else {t.name: t for t in source}
    if checks is None and workspace is not None:
        checks = check_tools(workspace)
    twins = {t.name: t for t in checks or ()}
    chosen_models = models or {}
    return [
        _BY_NAME[name].build(
            chosen_models.get(name, model), available, max_turns=max_turns, checks=twins, max_result_chars=max_result_chars
        )
        for name in names
    ]
