"""The data example end to end: schema, queries in parallel, a PNG chart and a summary, over a database only read.

The goal is planned by a scripted planner (it returns the example's plan),
the writer's summary is scripted, and the tools are the example's own
(``examples/data/tools.py``) on a database built from its ``shop.sql``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from planexec import ReviewOptions, Team, Toolbox
from planexec.testing import ScriptedModel

pytest.importorskip("matplotlib", reason="the chart needs matplotlib: pip install matplotlib")
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "data"
PLAN = EXAMPLE / "plan.json"
TOOLS = EXAMPLE / "tools.py"
SUMMARY = "North brings the most revenue (1,271.00); espresso beans sell best; revenue peaks in one month. See the chart."
REGIONS = [
    {"region": "North", "revenue": 1271.0},
    {"region": "South", "revenue": 1030.5},
    {"region": "East", "revenue": 926.5},
    {"region": "West", "revenue": 120.0},
]


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DATA_WORKSPACE", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "data"


def team(answers: list[str] | ScriptedModel) -> Team:
    """The planner and the writer on one scripted model; ``--yes`` approves the plan."""
    return Team(
        answers if isinstance(answers, ScriptedModel) else ScriptedModel(answers, name="script:planner"),
        mode="plan",
        toolbox=Toolbox(modules=[str(TOOLS)], roles=True, workspace="workspace"),
        review=ReviewOptions(auto_approve=True),
    )


def state(db: Path) -> tuple[str, dict[str, int]]:
    """The database file's hash and each table's row count: what a refused write must leave as it was."""
    with sqlite3.connect(db) as conn:
        counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("customers", "products", "orders")}
    conn.close()
    return hashlib.sha256(db.read_bytes()).hexdigest(), counts


def with_query(sql: str, *, grants: bool) -> str:
    """The example's plan with its 'regions' query replaced (as an injected or careless planner would write it)."""
    plan = json.loads(PLAN.read_text())
    step = next(s for s in plan["steps"] if s["id"] == "regions")
    step["parameters"]["sql"] = sql
    if not grants:
        del step["capabilities"]
    return json.dumps(plan)


def test_the_goal_is_planned_and_answered_with_queries_in_parallel_a_chart_and_a_summary(workspace: Path) -> None:
    model = ScriptedModel([PLAN.read_text(), SUMMARY], name="script:planner")
    result = team(model).run_sync("Which region brings the most revenue, what sells best, how do months compare?")

    assert result.status == "succeeded", result.error
    assert result.answer == SUMMARY
    tables = {t["name"]: [c["name"] for c in t["columns"]] for t in result.steps["schema"].output.value}
    assert tables["orders"] == ["order_id", "customer_id", "product_id", "quantity", "ordered_on"]
    assert result.steps["regions"].output.value["rows"] == REGIONS
    assert [r["product"] for r in result.steps["products"].output.value["rows"]] == [
        "Espresso beans 1kg",
        "Decaf beans 1kg",
        "Cleaning tablets",
    ]
    assert [r["month"] for r in result.steps["months"].output.value["rows"]] == [f"2026-0{m}" for m in range(1, 7)]
    # the three queries depend only on the schema: all of them started before any of them finished
    queries = [result.steps[s] for s in ("regions", "products", "months")]
    assert max(q.started_at for q in queries if q.started_at) <= min(q.finished_at for q in queries if q.finished_at)

    chart = result.steps["chart"].output.value
    png = workspace / "charts" / chart["path"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart["sha256"] == hashlib.sha256(png.read_bytes()).hexdigest()
    assert chart["bars"] == [{"label": r["region"], "value": r["revenue"]} for r in REGIONS]
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (chart["width"], chart["height"]) == (640, 400)
        assert json.loads(image.text["Description"]) == chart["bars"]  # the bars' data travels in the PNG itself
        assert image.text["Title"] == "Revenue by region"
    # the writer was shown the query results and the chart, not asked to invent them
    shown = " ".join(m.content for m in model.requests[-1].messages)
    assert "1271.0" in shown and "Espresso beans 1kg" in shown and "charts/revenue_by_region.png" in shown


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE orders",
        "UPDATE products SET price_cents = 1",
        "DELETE FROM orders",
        "PRAGMA writable_schema = ON",
    ],
)
def test_a_write_is_refused_by_the_plans_grant(workspace: Path, sql: str) -> None:
    result = team([with_query(sql, grants=True), SUMMARY]).run_sync("Revenue by region")

    regions = result.steps["regions"]
    assert regions.state == "failed" and regions.error is not None and regions.error.rule == "outside_grant"
    assert "step 'regions'" in regions.error.message and "argument 'sql'" in regions.error.message
    assert result.steps["chart"].state == "cancelled"


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("DROP TABLE orders", "'DROP' is refused"),
        ("  update products set price_cents = 1", "'UPDATE' is refused"),
        ("/* a comment */ INSERT INTO customers VALUES (99, 'x', 'y')", "'INSERT' is refused"),
        ("SELECT 1; DROP TABLE orders", "sql refused by the database: You can only execute one statement at a time"),
        ("WITH gone AS (SELECT 1) DELETE FROM orders", "sql refused by the database: not authorized"),
        ("SELECT * FROM nowhere", "sql refused by the database: no such table: nowhere"),
    ],
    ids=["drop", "update", "insert", "two-statements", "cte-delete", "typo"],
)
def test_a_write_the_plan_did_not_bound_is_refused_by_the_tool_and_the_database_is_unchanged(workspace: Path, sql: str, why: str) -> None:
    from importlib import util

    spec = util.spec_from_file_location("data_tools", TOOLS)
    assert spec is not None and spec.loader is not None
    tools = util.module_from_spec(spec)
    spec.loader.exec_module(tools)
    before = state(tools.database())

    result = team([with_query(sql, grants=False), SUMMARY]).run_sync("Revenue by region")

    regions = result.steps["regions"]
    assert regions.state == "failed" and regions.error is not None
    assert regions.error.message.startswith("step 'regions': ") and why in regions.error.message
    assert "Traceback" not in regions.error.message
    assert state(tools.database()) == before
    assert result.steps["schema"].state == "succeeded" and result.steps["chart"].state == "cancelled"


def test_the_readme_command_with_yes_answers_from_the_checkout(tmp_path: Path) -> None:
    """``planexec run --plan examples/data/plan.json --tools examples/data/tools.py --yes``, the writer on a scripted model."""
    driver = tmp_path / "drive.py"
    driver.write_text(
        "import sys\n"
        "from planexec.cli.main import main\n"
        "from planexec.models.providers import register_provider\n"
        "from planexec.testing import ScriptedModel\n"
        f"register_provider('script', lambda model, options: ScriptedModel([{SUMMARY!r}]), replace=True)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["run", "--plan", "examples/data/plan.json", "--tools", "examples/data/tools.py", "--yes", "--json"]
    env = {**os.environ, "DATA_WORKSPACE": str(tmp_path / "data"), "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    proc = subprocess.run(
        [sys.executable, str(driver), *argv, "--model", "script:writer", "--workspace", str(tmp_path / "workspace")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded" and result["answer"] == SUMMARY
    assert (tmp_path / "data" / "charts" / "revenue_by_region.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
