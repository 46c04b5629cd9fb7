"""Runs that are not worked where they were planned: the store's queue and the workers that take from it.

`worker` (`submit_plan` queues a plan as a run; `QueueWorker`, the loop of
``planexec worker``, takes queued runs and runs them), `local` (the worker
a face starts in a thread of its own for a single-machine setup) and
`saved` (the seam every plan not planned by a `Team` runs through: a plan
file, a template, a resumed or a queued run). The fleet is not a team: it
runs stored plans on the runner a run recorded, and a `Team` offers its
own worker (`Team.worker`) for the runs it submitted. Public: the names
in `__all__`. Imports `engine`,
`store`, `workers`, `plan`, `scale`, `telemetry` and `config`.
"""

from planexec.fleet.local import LocalWorker
from planexec.fleet.saved import recorded_runner, run_setup, saved_plan_engine
from planexec.fleet.worker import PARK_AFTER, FleetStore, QueueWorker, WorkerReport, WorkerRun, queue_store, submit_plan, tools_registry

__all__ = [
    "PARK_AFTER",
    "FleetStore",
    "LocalWorker",
    "QueueWorker",
    "WorkerReport",
    "WorkerRun",
    "queue_store",
    "recorded_runner",
    "run_setup",
    "saved_plan_engine",
    "submit_plan",
    "tools_registry",
]
