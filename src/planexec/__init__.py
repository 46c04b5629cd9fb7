"""planexec: planner–executor LLM agents with typed plans that people review, and a dependency-driven engine.

The public API comes in tiers. The names below (`__all__`) are the first:
`Team` works a goal end to end (route, plan, review, run, replan, join);
`Plan`, `Step`, `Registry`, `tool` and `Engine` run a plan you wrote. The
public submodules `planexec.events`, `planexec.errors`,
`planexec.policies`, `planexec.store` and `planexec.testing` each list
their own `__all__`. Everything else is private and may change.

    from planexec import Team

    def add(a: int, b: int) -> int:
        return a + b

    team = Team("local:smollm2", tools=[add])
    print(team.run_sync("What is 17 plus 25?").answer)
"""

import importlib
import warnings
from typing import Any

from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine, Run
from planexec.engine.results import RunResult, RunStatus, StepRecord, StepState
from planexec.errors import PlanexecError, Problem
from planexec.models.base import Model
from planexec.models.profile import ModelProfile
from planexec.models.providers import resolve_model
from planexec.plan.drafts import Planning
from planexec.plan.model import FailureAction, Plan, Step
from planexec.plan.validation import check_plan, validate_plan
from planexec.planning.planner import Planner
from planexec.team.subteam import SubTeam
from planexec.team.team import Team
from planexec.usage import Budget, Usage
from planexec.workers.context import ToolContext
from planexec.workers.io import StepCall
from planexec.workers.registry import Registry
from planexec.workers.tools import Tool, tool
from planexec.workers.worker import RoleWorker, Worker

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "Engine",
    "EngineConfig",
    "FailureAction",
    "Model",
    "ModelProfile",
    "Plan",
    "PlanexecError",
    "Planner",
    "Planning",
    "Problem",
    "Registry",
    "RoleWorker",
    "Run",
    "RunResult",
    "RunStatus",
    "Step",
    "StepCall",
    "StepRecord",
    "StepState",
    "SubTeam",
    "Team",
    "Tool",
    "ToolContext",
    "Usage",
    "Worker",
    "check_plan",
    "resolve_model",
    "tool",
    "validate_plan",
]

# Names that were at the top level before the API was tiered: still importable, with a warning naming
# their home (a public submodule where there is one), until the next minor release.
_MOVED: dict[str, str] = {
    "ApprovalDecided": "planexec.events",
    "ApprovalRequested": "planexec.events",
    "Approver": "planexec.policies",
    "CheckFailedError": "planexec.errors",
    "Checker": "planexec.engine.criteria",
    "ConfigError": "planexec.errors",
    "CriteriaChecker": "planexec.engine.criteria",
    "Criterion": "planexec.plan.model",
    "CriticCriterion": "planexec.plan.model",
    "CriticWorker": "planexec.workers.worker",
    "DurableRunner": "planexec.store",
    "ErrorInfo": "planexec.engine.results",
    "Event": "planexec.events",
    "ForbidTools": "planexec.policies",
    "FunctionJoiner": "planexec.planning.joiner",
    "FunctionReplanner": "planexec.planning.replanner",
    "FunctionSynthesizer": "planexec.engine.synthesis",
    "JoinContext": "planexec.planning.joiner",
    "JoinDecision": "planexec.planning.joiner",
    "Joiner": "planexec.planning.joiner",
    "JoinerDecided": "planexec.events",
    "JoinerError": "planexec.planning.joiner",
    "LocalRunner": "planexec.engine.runner",
    "MaxEstimatedCost": "planexec.policies",
    "MaxSteps": "planexec.policies",
    "ModelChoice": "planexec.models.settings",
    "ModelError": "planexec.errors",
    "ModelJoiner": "planexec.planning.joiner",
    "ModelOutputError": "planexec.errors",
    "ModelSettings": "planexec.models.settings",
    "Output": "planexec.workers.io",
    "PlanApprover": "planexec.policies",
    "PlanCompleted": "planexec.events",
    "PlanDiff": "planexec.plan.diff",
    "PlanDraft": "planexec.planning.planner",
    "PlanDrafted": "planexec.events",
    "PlanError": "planexec.errors",
    "PlanMapping": "planexec.plan.vocabulary",
    "PlanParseError": "planexec.errors",
    "PlanRevised": "planexec.events",
    "PlanStepParsed": "planexec.events",
    "PlanStream": "planexec.planning.stream",
    "PlanValidationError": "planexec.errors",
    "PlanVersion": "planexec.engine.results",
    "PlannerReplanner": "planexec.planning.replanner",
    "PlanningError": "planexec.errors",
    "Policy": "planexec.policies",
    "PolicySet": "planexec.policies",
    "PolicyVerdict": "planexec.policies",
    "PostgresRunStore": "planexec.store",
    "Predicate": "planexec.workers.tools",
    "Price": "planexec.models.pricing",
    "PriceTable": "planexec.models.pricing",
    "Provenance": "planexec.workers.io",
    "RegistryError": "planexec.errors",
    "ReplanContext": "planexec.planning.replanner",
    "ReplanRequest": "planexec.engine.results",
    "ReplanRequested": "planexec.errors",
    "ReplanStarted": "planexec.events",
    "Replanner": "planexec.planning.replanner",
    "RequiresOrder": "planexec.policies",
    "ResumeError": "planexec.store",
    "Review": "planexec.policies",
    "Revision": "planexec.planning.replanner",
    "RiskEscalation": "planexec.policies",
    "RollbackFinished": "planexec.events",
    "RollbackPlan": "planexec.plan.model",
    "RollbackStarted": "planexec.events",
    "Route": "planexec.planning.router",
    "RunAbortedError": "planexec.errors",
    "RunCancelledError": "planexec.errors",
    "RunError": "planexec.errors",
    "RunFinished": "planexec.events",
    "RunNotFoundError": "planexec.store",
    "RunResumed": "planexec.events",
    "RunStarted": "planexec.events",
    "RunStore": "planexec.store",
    "Runner": "planexec.engine.runner",
    "SqliteRunStore": "planexec.store",
    "StepCancelled": "planexec.events",
    "StepFailed": "planexec.events",
    "StepJudged": "planexec.events",
    "StepReady": "planexec.events",
    "StepRerouted": "planexec.events",
    "StepResolved": "planexec.events",
    "StepRetried": "planexec.events",
    "StepSkipped": "planexec.events",
    "StepStarted": "planexec.events",
    "StepSucceeded": "planexec.events",
    "StepTimeoutError": "planexec.errors",
    "StoreApprover": "planexec.policies",
    "StoreError": "planexec.store",
    "SubRunEvent": "planexec.events",
    "Synthesizer": "planexec.engine.synthesis",
    "TemplateError": "planexec.library.templates",
    "ToolError": "planexec.errors",
    "ToolInputError": "planexec.errors",
    "ToolOutputError": "planexec.errors",
    "ToolWorker": "planexec.workers.worker",
    "ToolsNeedPerson": "planexec.policies",
    "Verdict": "planexec.workers.worker",
    "WorkResult": "planexec.workers.io",
    "agent_worker": "planexec.team.agent",
    "build_team": "planexec.workers.builtin_team",
    "builtin_roles": "planexec.workers.roles",
    "default_toolkit": "planexec.workers.toolkit",
    "diff_plans": "planexec.plan.diff",
    "instantiate": "planexec.library.templates",
    "load_foreign_plan": "planexec.plan.vocabulary",
    "load_policies": "planexec.policies",
    "open_store": "planexec.store",
    "parse_event": "planexec.events",
    "parse_llmcompiler": "planexec.plan.formats",
    "parse_rewoo": "planexec.plan.formats",
    "policy": "planexec.policies",
    "predicate": "planexec.workers.tools",
    "record_run": "planexec.store",
    "resolve_step": "planexec.store",
    "review_plan": "planexec.policies",
    "route": "planexec.planning.router",
    "run_single": "planexec.team.agent",
    "save_run_template": "planexec.library.templates",
}


def __getattr__(name: str) -> Any:
    """A moved name: import it from its home, with a `DeprecationWarning` saying where that is."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'planexec' has no attribute {name!r}")
    warnings.warn(f"planexec.{name} moved: import it from {home}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
