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
(`redact`: the secrets no output shows). `CallRecord` is one tool call a
step's worker asked for and what was decided; `step_hash` the content hash
a step's approval is frozen by; `single_plan` the one-step plan of a single
agent's run. `run_to_end` runs a coroutine to its end from code without an
event loop, as `asyncio.run` does but never hanging on leftover tasks;
`in_thread` awaits a blocking call (a person's answer at a terminal) in a
daemon thread of its own, which never keeps the process alive at exit.
"""

from planexec.engine.approval import PlanEdit, find_edit, step_hash
from planexec.engine.loop import run_to_end
from planexec.engine.replay import RunView, replay
from planexec.engine.results import ErrorInfo, ModelAttempt, PlanVersion, RunStatus, StepRecord, StepState, describe_refused
from planexec.secrets import redact
from planexec.store.approvals import edit_plan, pending_version, run_setup
from planexec.store.base import Approval, ApprovalState, Lease, RunSummary
from planexec.store.queue import QueuedRun, QueueState
from planexec.team.agent import single_plan
from planexec.workers.gate import CallRecord
from planexec.workers.tools import in_thread

__all__ = [
    "Approval",
    "ApprovalState",
    "CallRecord",
    "ErrorInfo",
    "Lease",
    "ModelAttempt",
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
    "in_thread",
    "pending_version",
    "redact",
    "replay",
    "run_setup",
    "run_to_end",
    "single_plan",
    "step_hash",
]
