"""planexec: planner-executor LLM agents with typed plans and a dependency-driven engine.

The public API is what `__all__` lists; everything else is private and may
change. Start with `Plan`, `Registry` and `Engine`::

    registry = Registry.default()

    @registry.tool
    def add(a: int, b: int) -> int:
        return a + b

    plan = Plan.from_json(open("plan.json").read())
    result = Engine(registry).run_sync(plan)
"""

from .agent import agent_worker, run_single
from .approval import PlanApprover, StoreApprover
from .calls import Output, Provenance, StepCall, WorkResult
from .checks import Checker, CriteriaChecker
from .engine import Approver, Engine, Run
from .errors import (
    CheckFailedError,
    ConfigError,
    ModelError,
    ModelOutputError,
    PlanError,
    PlanexecError,
    PlanningError,
    PlanParseError,
    PlanValidationError,
    Problem,
    RegistryError,
    ReplanRequested,
    RunAbortedError,
    RunCancelledError,
    RunError,
    StepTimeoutError,
    ToolError,
    ToolInputError,
    ToolOutputError,
)
from .events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    JoinerDecided,
    PlanCompleted,
    PlanDrafted,
    PlanRevised,
    PlanStepParsed,
    ReplanStarted,
    RollbackFinished,
    RollbackStarted,
    RunFinished,
    RunResumed,
    RunStarted,
    StepCancelled,
    StepFailed,
    StepJudged,
    StepReady,
    StepRerouted,
    StepResolved,
    StepRetried,
    StepSkipped,
    StepStarted,
    StepSucceeded,
    SubRunEvent,
    parse_event,
)
from .formats import parse_llmcompiler, parse_rewoo
from .joiner import (
    FunctionJoiner,
    JoinContext,
    JoinDecision,
    Joiner,
    JoinerError,
    ModelJoiner,
)
from .library import TemplateError, instantiate, save_run_template
from .mapping import PlanMapping, load_foreign_plan
from .models.providers import resolve_model
from .plan import Criterion, CriticCriterion, FailureAction, Plan, RollbackPlan, Step
from .plan_diff import PlanDiff, diff_plans
from .plan_stream import PlanStream
from .planner import PlanDraft, Planner, Planning
from .policies import Policy, PolicyVerdict, Review, policy, review_plan
from .policy_rules import (
    ForbidTools,
    MaxEstimatedCost,
    MaxSteps,
    RequiresOrder,
    RiskEscalation,
    ToolsNeedPerson,
)
from .policy_sets import PolicySet, load_policies
from .pricing import Price, PriceTable
from .recorder import DurableRunner, record_run
from .registry import Registry
from .replanning import (
    FunctionReplanner,
    PlannerReplanner,
    ReplanContext,
    Replanner,
    Revision,
)
from .results import (
    ErrorInfo,
    PlanVersion,
    ReplanRequest,
    RunResult,
    RunStatus,
    StepRecord,
    StepState,
)
from .resume import ResumeError, resolve_step
from .roles import builtin_roles
from .router import Route, route
from .runner import LocalRunner, Runner
from .settings import ModelChoice, ModelSettings
from .store import (
    PostgresRunStore,
    RunNotFoundError,
    RunStore,
    SqliteRunStore,
    StoreError,
    open_store,
)
from .subteam import SubTeam
from .synthesis import FunctionSynthesizer, Synthesizer
from .team import build_team
from .toolkit import default_toolkit
from .tools import Predicate, Tool, predicate, tool
from .usage import Budget, Usage
from .validation import check_plan, validate_plan
from .workers import CriticWorker, RoleWorker, ToolWorker, Verdict, Worker

__version__ = "0.1.0"

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "Approver",
    "Budget",
    "CheckFailedError",
    "Checker",
    "ConfigError",
    "CriteriaChecker",
    "Criterion",
    "CriticCriterion",
    "CriticWorker",
    "DurableRunner",
    "Engine",
    "ErrorInfo",
    "Event",
    "FailureAction",
    "ForbidTools",
    "FunctionJoiner",
    "FunctionReplanner",
    "FunctionSynthesizer",
    "JoinContext",
    "JoinDecision",
    "Joiner",
    "JoinerDecided",
    "JoinerError",
    "LocalRunner",
    "MaxEstimatedCost",
    "MaxSteps",
    "ModelChoice",
    "ModelError",
    "ModelJoiner",
    "ModelOutputError",
    "ModelSettings",
    "Output",
    "Plan",
    "PlanApprover",
    "PlanCompleted",
    "PlanDiff",
    "PlanDraft",
    "PlanDrafted",
    "PlanError",
    "PlanMapping",
    "PlanParseError",
    "PlanRevised",
    "PlanStepParsed",
    "PlanStream",
    "PlanValidationError",
    "PlanVersion",
    "PlanexecError",
    "Planner",
    "PlannerReplanner",
    "Planning",
    "PlanningError",
    "Policy",
    "PolicySet",
    "PolicyVerdict",
    "PostgresRunStore",
    "Predicate",
    "Price",
    "PriceTable",
    "Problem",
    "Provenance",
    "Registry",
    "RegistryError",
    "ReplanContext",
    "ReplanRequest",
    "ReplanRequested",
    "ReplanStarted",
    "Replanner",
    "RequiresOrder",
    "ResumeError",
    "Review",
    "Revision",
    "RiskEscalation",
    "RoleWorker",
    "RollbackFinished",
    "RollbackPlan",
    "RollbackStarted",
    "Route",
    "Run",
    "RunAbortedError",
    "RunCancelledError",
    "RunError",
    "RunFinished",
    "RunNotFoundError",
    "RunResult",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "RunStore",
    "Runner",
    "SqliteRunStore",
    "Step",
    "StepCall",
    "StepCancelled",
    "StepFailed",
    "StepJudged",
    "StepReady",
    "StepRecord",
    "StepRerouted",
    "StepResolved",
    "StepRetried",
    "StepSkipped",
    "StepStarted",
    "StepState",
    "StepSucceeded",
    "StepTimeoutError",
    "StoreApprover",
    "StoreError",
    "SubRunEvent",
    "SubTeam",
    "Synthesizer",
    "TemplateError",
    "Tool",
    "ToolError",
    "ToolInputError",
    "ToolOutputError",
    "ToolWorker",
    "ToolsNeedPerson",
    "Usage",
    "Verdict",
    "WorkResult",
    "Worker",
    "agent_worker",
    "build_team",
    "builtin_roles",
    "check_plan",
    "default_toolkit",
    "diff_plans",
    "instantiate",
    "load_foreign_plan",
    "load_policies",
    "open_store",
    "parse_event",
    "parse_llmcompiler",
    "parse_rewoo",
    "policy",
    "predicate",
    "record_run",
    "resolve_model",
    "resolve_step",
    "review_plan",
    "route",
    "run_single",
    "save_run_template",
    "tool",
    "validate_plan",
]
