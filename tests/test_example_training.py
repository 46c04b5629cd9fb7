"""examples/training: a store filled by the example's scripted runs exports the records the docs page shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_example_fills_a_store_that_exports_every_kind_of_record(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    filled = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "training" / "fill_store.py"), "demo.db"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert filled.returncode == 0, filled.stderr
    assert filled.stdout.count("succeeded") == 3 and "aborted" in filled.stdout
    exported = subprocess.run(
        [sys.executable, "-m", "planexec", "export", "training", "out", "--store", "demo.db", "--holdout", "0"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert "3 supervised example(s) and 3 preference pair(s) from 3 of 4 run(s)" in exported.stdout
    pairs = [json.loads(line) for line in (tmp_path / "out" / "pairs-train.jsonl").read_text().splitlines()]
    assert sorted(p["metadata"]["kind"] for p in pairs) == ["edited", "invalid", "replanned"]
    sft = [json.loads(line) for line in (tmp_path / "out" / "sft-train.jsonl").read_text().splitlines()]
    answers = {r["metadata"]["goal"]: json.loads(r["messages"][-1]["content"]) for r in sft}
    assert answers["Add twenty and twenty-two"]["steps"][0]["parameters"] == {"a": 20, "b": 22}  # the person's edit ran
