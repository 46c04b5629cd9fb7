"""Tools of the data example: questions over a SQLite database, answered by read-only queries, a chart and a summary.

The database is built from ``examples/data/shop.sql`` into
``$DATA_WORKSPACE/shop.db`` (default ``workspace/data``) on first use; the
chart lands in ``$DATA_WORKSPACE/charts``.

- ``describe_schema`` lists the tables and their columns;
- ``run_query`` runs one SELECT. It is read-only three times over: it
  refuses any statement that is not a single SELECT (or WITH ... SELECT),
  it opens the database read-only (``mode=ro``), and an authorizer lets the
  statement read and nothing else;
- ``bar_chart`` draws rows as a bar chart, a PNG (matplotlib, Agg, which
  planexec depends on), whose metadata keeps the bars' data.

    planexec run --plan examples/data/plan.json --tools examples/data/tools.py --yes
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel

from planexec import ToolContext, tool
from planexec.errors import ToolError

SQL = Path(__file__).resolve().parent / "shop.sql"
MAX_ROWS = 500

# what a SELECT may do: read tables, call functions, and build its own result (a CTE, a subquery, a recursive one)
_READ_ACTIONS = frozenset(
    getattr(sqlite3, name) for name in ("SQLITE_SELECT", "SQLITE_READ", "SQLITE_FUNCTION", "SQLITE_RECURSIVE") if hasattr(sqlite3, name)
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def workspace() -> Path:
    """Where the database and the charts live (``$DATA_WORKSPACE``, default ``workspace/data``)."""
    return Path(os.environ.get("DATA_WORKSPACE", "workspace/data")).resolve()


def database() -> Path:
    """The example's database, built from shop.sql the first time (written whole, then renamed into place)."""
    path = workspace() / "shop.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".db.{os.getpid()}.part")
        partial.unlink(missing_ok=True)
        with sqlite3.connect(partial) as db:
            db.executescript(SQL.read_text(encoding="utf-8"))
        db.close()
        partial.replace(path)
    return path


def _who(context: ToolContext[Any]) -> str:
    return f"step {context.step_id!r}" if context.step_id else f"tool {context.tool!r}"


def _authorize(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _read_only(*, authorize: bool = True) -> sqlite3.Connection:
    """The database opened read-only; with `authorize` (a query's own SQL) every action but a read is denied too."""
    db = sqlite3.connect(f"{database().as_uri()}?mode=ro", uri=True)
    if authorize:
        db.set_authorizer(_authorize)
    return db


class Column(BaseModel):
    name: str
    type: str


class Table(BaseModel):
    """A table of the database: its columns and how many rows it has."""

    name: str
    columns: list[Column]
    rows: int


class QueryResult(BaseModel):
    """What a query returned: its columns, its rows as objects, and whether rows were cut at the bound."""

    sql: str
    columns: list[str]
    rows: list[dict[str, Any]]
    truncated: bool


class Bar(BaseModel):
    label: str
    value: float


class Chart(BaseModel):
    """A chart written as PNG: where, its size, its hash, and the bars it shows (also in the PNG's metadata)."""

    path: str
    title: str
    bars: list[Bar]
    width: int
    height: int
    sha256: str


@tool(read_only=True)
def describe_schema() -> list[Table]:
    """The tables of the database, with their columns and row counts."""
    with _read_only(authorize=False) as db:  # its own fixed statements: pragma_table_info is no read to the authorizer
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        tables = []
        for name in names:
            columns = [Column(name=c[1], type=c[2]) for c in db.execute("SELECT * FROM pragma_table_info(?)", (name,))]
            quoted = name.replace('"', '""')
            count = db.execute(f'SELECT COUNT(*) FROM "{quoted}"').fetchone()[0]
            tables.append(Table(name=name, columns=columns, rows=count))
    db.close()
    return tables


@tool(read_only=True, sensitive=("sql",))
def run_query(sql: str, context: ToolContext[Any]) -> QueryResult:
    """Run one read-only SQL query (a SELECT, or WITH ... SELECT) on the database; its rows as objects."""
    who = _who(context)
    words = _COMMENTS.sub(" ", sql).split()
    first = words[0].upper() if words else ""
    if first not in ("SELECT", "WITH"):
        raise ToolError(
            f"{who}: sql must be one read-only SELECT statement; {first or 'an empty statement'!r} is refused: {sql.strip()[:80]!r}",
            tool=context.tool,
        )
    try:
        with _read_only() as db:
            cursor = db.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows = cursor.fetchmany(MAX_ROWS + 1)
        db.close()
    except (sqlite3.DatabaseError, sqlite3.Warning) as exc:  # a write the authorizer or mode=ro refused, two statements, a typo
        raise ToolError(f"{who}: sql refused by the database: {exc}: {sql.strip()[:80]!r}", tool=context.tool) from None
    return QueryResult(sql=sql, columns=columns, rows=[dict(zip(columns, r)) for r in rows[:MAX_ROWS]], truncated=len(rows) > MAX_ROWS)


@tool(idempotent=True, untrusted_output=False)
def bar_chart(rows: list[dict[str, Any]], label: str, value: str, title: str, path: str, context: ToolContext[Any]) -> Chart:
    """Draw rows as a bar chart, one bar per row (`label` and `value` name the columns), saved as a PNG under charts/."""
    who = _who(context)
    pure = PurePosixPath(path)
    if "\\" in path or pure.is_absolute() or ".." in pure.parts or pure.suffix != ".png":
        raise ToolError(f"{who}: path {path!r} must be a relative .png path inside charts/", tool=context.tool)
    if not rows:
        raise ToolError(f"{who}: rows is empty: there is nothing to draw", tool=context.tool)
    bars = []
    for n, row in enumerate(rows):
        if label not in row or value not in row:
            raise ToolError(
                f"{who}: rows[{n}] has no column {label if label not in row else value!r} (it has {', '.join(row)})", tool=context.tool
            )
        if not isinstance(row[value], int | float) or isinstance(row[value], bool):
            raise ToolError(f"{who}: rows[{n}].{value} = {row[value]!r} is not a number", tool=context.tool)
        bars.append(Bar(label=str(row[label]), value=float(row[value])))
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise ToolError(f"{who}: bar_chart needs matplotlib: pip install matplotlib", tool=context.tool) from None
    target = workspace() / "charts" / pure
    target.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = pyplot.subplots(figsize=(6.4, 4.0), dpi=100)
    try:
        axes.bar([b.label for b in bars], [b.value for b in bars], color="#4c72b0")
        axes.set_title(title)
        axes.set_xlabel(label)
        axes.set_ylabel(value)
        figure.tight_layout()
        data = json.dumps([b.model_dump() for b in bars])
        figure.savefig(target, format="png", metadata={"Title": title, "Description": data, "Software": "planexec data example"})
        width, height = (int(x) for x in figure.canvas.get_width_height())
    finally:
        pyplot.close(figure)
    return Chart(
        path=pure.as_posix(), title=title, bars=bars, width=width, height=height, sha256=hashlib.sha256(target.read_bytes()).hexdigest()
    )
