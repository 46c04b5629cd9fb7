"""Plan templates in the run store: named plans saved as numbered versions with their declared parameters.

Owns `TemplateBook`, the store's part that keeps the ``templates`` table,
over its `database.Database`: saving gives the next version of a name, reading
takes the latest or a given version, deleting takes one version or all,
and a name or version that is not there is a `TemplateNotFoundError`.
Each version is saved with its hash (`audit.template_hash`) and checked
against it each time it is read: a version changed in the database, or
one saved since versions are hashed that lost its hash, is a
`TamperedError` naming it, never a plan to run. `problems` lists them all
for ``planexec store check``. Imports `plan`, `errors` and the store's
`audit`, `base`, `database`, `rows` and `schema`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from planexec.errors import TamperedError, TemplateNotFoundError
from planexec.plan.model import Plan
from planexec.store.audit import template_content, template_hash, template_problem
from planexec.store.base import Template
from planexec.store.database import Database
from planexec.store.rows import from_timestamp, now
from planexec.store.schema import TEMPLATES_AUDIT_SINCE

__all__ = ["TemplateBook"]

_TEMPLATE_COLUMNS = "name, version, plan, params, created_at, description, source_run_id, hash"
_TEMPLATE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$")


class TemplateBook:
    """The plan library of a store (see the module docstring), over its `database.Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save_template(
        self,
        name: str,
        plan: Plan | dict[str, Any],
        *,
        params: Sequence[str] = (),
        description: str = "",
        source_run_id: str | None = None,
    ) -> Template:
        """Save `plan` as the next version of template `name` (1 for a new name)."""
        if not _TEMPLATE_NAME.match(name):
            raise ValueError(f"template name {name!r} must be letters, digits, '_', '.' or '-' (at most 200)")
        if isinstance(params, str) or any(not isinstance(p, str) or not p for p in params):
            raise ValueError(f"template parameters must be a list of non-empty names, not {params!r}")
        data = json.loads(plan.model_dump_json(by_alias=True, exclude={"content_hash"})) if isinstance(plan, Plan) else plan
        text = json.dumps(data, ensure_ascii=False)
        declared = json.dumps(list(dict.fromkeys(params)))
        with self.db.tx(write=True) as cur:
            row = self.db.one(cur, "SELECT MAX(version) FROM templates WHERE name = ?", (name,))
            version = int(row[0] or 0) + 1
            created = now()
            digest = template_hash(name, version, template_content(text, declared, description, source_run_id, created))
            cur.execute(
                self.db.q(f"INSERT INTO templates ({_TEMPLATE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                (name, version, text, declared, created, description, source_run_id, digest),
            )
            row = self.db.one(cur, f"SELECT {_TEMPLATE_COLUMNS} FROM templates WHERE name = ? AND version = ?", (name, version))
        return _template(row)

    def template(self, name: str, version: int | None = None) -> Template:
        """The latest (or the given) version of template `name`; `TemplateNotFoundError` when there is none."""
        sql = f"SELECT {_TEMPLATE_COLUMNS} FROM templates WHERE name = ?"
        params: tuple[Any, ...] = (name,)
        sql += " AND version = ?" if version is not None else " ORDER BY version DESC LIMIT 1"
        params += (version,) if version is not None else ()
        with self.db.tx(write=False) as cur:
            row = self.db.one(cur, sql, params)
            if row is None:
                raise TemplateNotFoundError(name, version, location=self.db.location)
            self._require_intact([row], cur)
        return _template(row)

    def templates(self, name: str | None = None) -> list[Template]:
        """Every saved version, of one name or all, by name then version."""
        where, params = (" WHERE name = ?", (name,)) if name is not None else ("", ())
        with self.db.tx(write=False) as cur:
            rows = self.db.all(cur, f"SELECT {_TEMPLATE_COLUMNS} FROM templates{where} ORDER BY name, version", params)
            self._require_intact(rows, cur)
        return [_template(r) for r in rows]

    def problems(self) -> tuple[int, list[str]]:
        """How many template versions the store holds, and what is wrong with each that changed (see `audit.template_problem`)."""
        with self.db.tx(write=False) as cur:
            rows = self.db.all(cur, f"SELECT {_TEMPLATE_COLUMNS} FROM templates ORDER BY name, version")
            return len(rows), self._problems(rows, cur)

    def _problems(self, rows: Sequence[Any], cur: Any) -> list[str]:
        if not rows:
            return []
        row = self.db.one(cur, "SELECT value FROM planexec_meta WHERE key = ?", (TEMPLATES_AUDIT_SINCE,))
        since = from_timestamp(row[0]) if row is not None else None
        found = []
        for name, version, plan, params, created, description, source, digest in rows:
            content = template_content(plan, params, description, source, created)
            problem = template_problem(name, int(version), content, digest, _time(created), since)
            if problem is not None:
                found.append(problem)
        return found

    def _require_intact(self, rows: Sequence[Any], cur: Any) -> None:
        """`TamperedError` naming the first template version read that changed (and how many did)."""
        found = self._problems(rows, cur)
        if found:
            first = rows[0][0] if len({r[0] for r in rows}) == 1 else None
            where = f" --store {shlex.quote(self.db.location)}"
            raise TamperedError(
                f"template {first!r}" if first else "the template library",
                found,
                inspect=f"planexec store check{where}",
                template=first,
                location=self.db.location,
            )

    def delete_template(self, name: str, version: int | None = None) -> int:
        """Delete one version of template `name`, or all of them; how many; `TemplateNotFoundError` when none."""
        sql = "DELETE FROM templates WHERE name = ?"
        params: list[object] = [name]
        if version is not None:
            sql, params = sql + " AND version = ?", [name, version]
        with self.db.tx(write=True) as cur:
            cur.execute(self.db.q(sql), params)
            deleted = cur.rowcount
            if not deleted:
                raise TemplateNotFoundError(name, version, location=self.db.location)
        return int(deleted)


def _time(text: Any) -> datetime | None:
    """A stored time; None when the column holds something that is not one."""
    try:
        return from_timestamp(str(text))
    except ValueError:
        return None


def _template(row: Sequence[Any]) -> Template:
    name, version, plan, params, created, description, source, _ = row
    return Template(
        name=name,
        version=int(version),
        plan=json.loads(plan),
        params=json.loads(params),
        created_at=from_timestamp(created),  # type: ignore[arg-type]  # the column is NOT NULL
        description=description,
        source_run_id=source,
    )
