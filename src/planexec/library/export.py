"""The plan library's export file: templates written to JSON to share, and read back in.

Owns the file's format and checking it. ``format_version`` 1::

    {"format": "planexec.template", "format_version": 1, "name": "deploy",
     "versions": [{"version": 1, "params": ["service"], "description": "",
                   "source_run_id": "run-1", "created_at": "...", "plan": {...}}]}

`export_templates` writes the versions of one template; `read_export`
checks a decoded file (the marker and version, each plan, its placeholders
against its declared params) and `import_templates` stores every version
as a new version of the name (an existing name is never overwritten),
after all of them passed. A foreign or damaged file is a `TemplateError`
(rule ``bad_file``) naming it. Imports `library`, `plan`, `validation`,
`errors` and the store's `base`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planexec.errors import PlanValidationError
from planexec.library.templates import PARAM_NAME, TemplateError, instantiate, placeholders
from planexec.plan.model import Plan
from planexec.plan.validation import check_plan
from planexec.store.base import RunStore, Template

__all__ = ["EXPORT_FORMAT", "EXPORT_FORMAT_VERSION", "export_templates", "import_templates", "read_export"]

EXPORT_FORMAT = "planexec.template"
EXPORT_FORMAT_VERSION = 1
_NAME = re.compile(rf"^{PARAM_NAME}$")


def export_templates(templates: Sequence[Template]) -> dict[str, Any]:
    """The export file's data for versions of one template (see the module docstring)."""
    names = {t.name for t in templates}
    if len(names) != 1:
        raise ValueError(f"an export holds versions of exactly one template, not {sorted(names)}")
    versions = [
        {"version": t.version, "params": list(t.params), "description": t.description, "source_run_id": t.source_run_id,
         "created_at": t.created_at.isoformat(), "plan": t.plan}
        for t in sorted(templates, key=lambda t: t.version)
    ]  # fmt: skip
    return {"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION, "name": names.pop(), "versions": versions}


def read_export(data: Any, *, source: str = "the file") -> list[Template]:
    """The versions an export file's decoded JSON holds, each checked: `TemplateError` (``bad_file``) naming `source` and what is wrong."""

    def bad(message: str, names: Iterable[str] = ()) -> TemplateError:
        return TemplateError(f"{source}: {message}", rule="bad_file", template=source, names=names)

    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise bad(f'not a planexec template export (no "format": "{EXPORT_FORMAT}")')
    if data.get("format_version") != EXPORT_FORMAT_VERSION:
        raise bad(f"format_version {data.get('format_version')!r} is not one this planexec reads ({EXPORT_FORMAT_VERSION})")
    name, versions = data.get("name"), data.get("versions")
    if not isinstance(name, str) or not name or not isinstance(versions, list) or not versions:
        raise bad('an export needs a "name" and a non-empty list of "versions"')
    out = []
    for i, entry in enumerate(versions):
        where = f"version #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("plan"), dict):
            raise bad(f"{where} has no plan object")
        params = entry.get("params", [])
        if not isinstance(params, list) or not all(isinstance(p, str) and _NAME.match(p) for p in params):
            raise bad(f"{where}: params must be a list of parameter names")
        description = entry.get("description") or ""
        if not isinstance(description, str):
            raise bad(f"{where}: description must be text")
        try:
            check_plan(Plan.from_data(entry["plan"]))
        except PlanValidationError as exc:
            raise bad(f"{where}: {exc.render()}") from None
        used = placeholders(entry["plan"])
        odd = [p for p in used if p not in params] + [p for p in params if p not in used]
        if odd:
            raise bad(f"{where}: the placeholders and the declared params differ on {', '.join(odd)}", odd)
        source_run, number = entry.get("source_run_id"), entry.get("version")
        template = Template(name=name, version=number if isinstance(number, int) else i + 1, plan=entry["plan"], params=params,
                            created_at=datetime.now(UTC), description=description,
                            source_run_id=source_run if isinstance(source_run, str) else None)  # fmt: skip
        try:  # filled in with its own placeholders it must give a valid plan
            instantiate(template, {p: "{{" + p + "}}" for p in params})
        except (TemplateError, PlanValidationError) as exc:
            raise bad(f"{where}: {exc}", getattr(exc, "names", ())) from None
        out.append(template)
    return out


def import_templates(store: RunStore, path: str | Path, *, name: str | None = None) -> list[Template]:
    """Store every version of the export file `path` as new versions of its template (or of `name`); nothing is stored if any is bad."""
    source = str(path)
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise TemplateError(f"cannot read {source!r}: {exc.strerror or exc}", rule="bad_file", template=source) from None
    except (ValueError, RecursionError) as exc:
        raise TemplateError(f"{source}: not JSON ({exc})", rule="bad_file", template=source) from None
    entries = read_export(data, source=source)
    target = name or entries[0].name  # every version was checked before the first is stored
    try:
        return [
            store.save_template(target, t.plan, params=t.params, description=t.description, source_run_id=t.source_run_id) for t in entries
        ]
    except ValueError as exc:
        raise TemplateError(str(exc), rule="bad_name", template=target) from None
