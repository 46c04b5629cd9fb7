"""Policies, review and approvals: who lets a plan or a step run (a public submodule).

`Policy` reviews a plan (`review_plan` combines verdicts: any reject
rejects, else any escalate asks a person); the built-in rules; `PolicySet`
and `load_policies` (Python modules, YAML rule files); `ReviewOutcome`;
and the approvers: `Approver` (a function asked before a step marked
`requires_approval`), `StoreApprover` and `PlanApprover` (durable approvals
kept in the run store, decided from any process). Imports `governance` and
`engine.approval`.
"""

from planexec.engine.approval import Approver, PlanApprover, StoreApprover
from planexec.governance.policies import Policy, PolicyContext, PolicyVerdict, Review, policy, review_plan
from planexec.governance.policy_sets import PolicySet, load_policies
from planexec.governance.review import ReviewOutcome
from planexec.governance.rules import ForbidTools, MaxEstimatedCost, MaxSteps, RequiresOrder, RiskEscalation, ToolsNeedPerson

__all__ = [
    "Approver",
    "ForbidTools",
    "MaxEstimatedCost",
    "MaxSteps",
    "PlanApprover",
    "Policy",
    "PolicyContext",
    "PolicySet",
    "PolicyVerdict",
    "RequiresOrder",
    "Review",
    "ReviewOutcome",
    "RiskEscalation",
    "StoreApprover",
    "ToolsNeedPerson",
    "load_policies",
    "policy",
    "review_plan",
]
