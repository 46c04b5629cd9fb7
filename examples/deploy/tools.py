"""Three local tools for the deployment example: test, back up, deploy.

They simulate the work (short sleeps, a state directory) so the example runs
anywhere. Set DEPLOY_FAILING_TESTS=N to make N tests fail: the `all_tests_pass`
criterion then rejects the test step and its `abort` action stops the run
before the database is backed up. Their outputs are their own computation,
not outside text (`untrusted_output=False`): the answer carries no warning.

    planexec run --plan examples/deploy/plan.json --tools examples/deploy/tools.py
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from planexec import tool
from planexec.workers.tools import predicate

STATE = Path(os.environ.get("DEPLOY_STATE_DIR", ".deploy-demo"))


class TestReport(BaseModel):
    suite: str
    environment: str
    total: int
    failed: int


def _log(kind: str, **fields: object) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "actions.jsonl", "a") as f:
        f.write(json.dumps({"action": kind, "at": datetime.now(UTC).isoformat(), "pid": os.getpid(), **fields}) + "\n")


@tool(worker="test-runner", untrusted_output=False)
def run_tests(test_suite: str, environment: str) -> TestReport:
    """Run a test suite against an environment and report how many tests failed."""
    time.sleep(0.2)
    failed = int(os.environ.get("DEPLOY_FAILING_TESTS", "0"))
    _log("run_tests", suite=test_suite, environment=environment, failed=failed)
    return TestReport(suite=test_suite, environment=environment, total=120, failed=failed)


@tool(worker="db-manager", untrusted_output=False)
def backup_database(database: str, backup_type: str = "full") -> dict:
    """Take a backup of a database; returns where it is."""
    time.sleep(0.2)
    location = str(STATE / f"{database}-{backup_type}.bak")
    _log("backup_database", database=database, backup_type=backup_type, location=location)
    return {"database": database, "location": location}


@tool(worker="k8s-deployer", untrusted_output=False)
def deploy_service(service: str, version: str, strategy: str = "rolling") -> dict:
    """Deploy a version of a service with a rollout strategy."""
    time.sleep(0.2)
    _log("deploy_service", service=service, version=version, strategy=strategy)
    return {"service": service, "version": version, "strategy": strategy, "status": "live"}


@predicate
def all_tests_pass(report: dict) -> tuple[bool, str]:
    """Every test in the report passed."""
    return report["failed"] == 0, f"{report['failed']} of {report['total']} tests failed"
