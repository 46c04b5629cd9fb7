"""Policies, review and approvals: who lets a plan or a step run (a public submodule).

`Policy` reviews a plan (`review_plan` combines verdicts: any reject
rejects, else any escalate asks a person); the built-in rules; `PolicySet`
and `load_policies` (Python modules, YAML rule files); `ReviewOutcome`;
and the approvers: `Approver` (a function asked before a step marked
`requires_approval`), `StoreApprover` and `PlanApprover` (durable approvals
kept in the run store, decided from any process; `decide_review`, the
decision when no person is asked; as a `call_approver` it
decides single tool calls, `CallRequest`s), `approve_calls` (the ``--yes``
answer to calls) and `person` (marks an approver a person, shown
escalations). `LimitGrants` and `narrow_plan` narrow what role steps may
call. Model routers pick the model a step with a cascade of models starts
on: `ModelRouter` (the protocol) and `RouteChoice`, the built-ins
`FirstModel`, `ByDifficulty`, `ByWorker`, `FirstOf` and `LearnedRouter`
(from a store's past runs), and `load_router` (by name). Imports
`governance`, `engine.approval`, `engine.calls`, `engine.cascade` and `workers.gate`.
"""

from planexec.engine.approval import Approver, PlanApprover, StoreApprover
from planexec.engine.calls import approve_calls, person
from planexec.engine.cascade import ByDifficulty, ByWorker, FirstModel, FirstOf, ModelRouter, RouteChoice
from planexec.governance.policies import Policy, PolicyContext, PolicyVerdict, Review, narrow_plan, policy, review_plan
from planexec.governance.policy_sets import PolicySet, load_policies
from planexec.governance.review import ReviewOutcome, decide_review
from planexec.governance.routing import LearnedRouter, load_router
from planexec.governance.rules import (
    ForbidTools,
    LimitGrants,
    MaxEstimatedCost,
    MaxSteps,
    RequiresOrder,
    RequireWindows,
    RiskEscalation,
    ToolsNeedPerson,
)
from planexec.workers.gate import CallRequest

__all__ = [
    "Approver",
    "ByDifficulty",
    "ByWorker",
    "CallRequest",
    "FirstModel",
    "FirstOf",
    "ForbidTools",
    "LearnedRouter",
    "LimitGrants",
    "MaxEstimatedCost",
    "MaxSteps",
    "ModelRouter",
    "PlanApprover",
    "Policy",
    "PolicyContext",
    "PolicySet",
    "PolicyVerdict",
    "RequireWindows",
    "RequiresOrder",
    "Review",
    "ReviewOutcome",
    "RiskEscalation",
    "RouteChoice",
    "StoreApprover",
    "ToolsNeedPerson",
    "approve_calls",
    "decide_review",
    "load_policies",
    "load_router",
    "narrow_plan",
    "person",
    "policy",
    "review_plan",
]
