"""The read model of runs, public: what a face lists, shows and follows runs with, and answers a waiting plan with.

A face reads a run from the store (`planexec.store.open_store`) as these
records: its summary (`RunSummary`, `RunStatus`), its plan versions
(`PlanVersion`), each step as its events make it (`replay` gives a
`RunView` of `StepRecord`s; `describe_refused` says why the contract
refused a call), its queue row (`QueuedRun`, `QueueState`), what waits
for a person (`Approval`, `ApprovalState`; `pending_version` is the plan
version an edit may replace, `run_setup` the tools it is checked against,
`find_edit` the edit that replaced a version) and a person's edit of a
waiting plan (`edit_plan`). Whatever a face sends out is redacted first
(`redact`: the secrets no output shows).
"""

from planexec.engine.approval import PlanEdit, find_edit
from planexec.engine.replay import RunView, replay
from planexec.engine.results import ErrorInfo, PlanVersion, RunStatus, StepRecord, StepState, describe_refused
from planexec.secrets import redact
from planexec.store.approvals import edit_plan, pending_version, run_setup
from planexec.store.base import Approval, ApprovalState, Lease, RunSummary
from planexec.store.queue import QueuedRun, QueueState

__all__ = [
    "Approval",
    "ApprovalState",
    "ErrorInfo",
    "Lease",
    "PlanEdit",
    "PlanVersion",
    "QueueState",
    "QueuedRun",
    "RunStatus",
    "RunSummary",
    "RunView",
    "StepRecord",
    "StepState",
    "describe_refused",
    "edit_plan",
    "find_edit",
    "pending_version",
    "redact",
    "replay",
    "run_setup",
]
