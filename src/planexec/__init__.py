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

from planexec.engine.approval import PlanApprover, StoreApprover
from planexec.engine.criteria import Checker, CriteriaChecker
from planexec.engine.engine import Approver, Engine, Run
from planexec.engine.events import (
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
from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.results import (
    ErrorInfo,
    PlanVersion,
    ReplanRequest,
    RunResult,
    RunStatus,
    StepRecord,
    StepState,
)
from planexec.engine.resume import ResumeError, resolve_step
from planexec.engine.runner import LocalRunner, Runner
from planexec.engine.synthesis import FunctionSynthesizer, Synthesizer
from planexec.errors import (
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
from planexec.governance.policies import Policy, PolicyVerdict, Review, policy, review_plan
from planexec.governance.policy_sets import PolicySet, load_policies
from planexec.governance.rules import (
    ForbidTools,
    MaxEstimatedCost,
    MaxSteps,
    RequiresOrder,
    RiskEscalation,
    ToolsNeedPerson,
)
from planexec.library.templates import TemplateError, instantiate, save_run_template
from planexec.models.pricing import Price, PriceTable
from planexec.models.providers import resolve_model
from planexec.models.settings import ModelChoice, ModelSettings
from planexec.plan.diff import PlanDiff, diff_plans
from planexec.plan.formats import parse_llmcompiler, parse_rewoo
from planexec.plan.model import Criterion, CriticCriterion, FailureAction, Plan, RollbackPlan, Step
from planexec.plan.validation import check_plan, validate_plan
from planexec.plan.vocabulary import PlanMapping, load_foreign_plan
from planexec.planning.joiner import (
    FunctionJoiner,
    JoinContext,
    JoinDecision,
    Joiner,
    JoinerError,
    ModelJoiner,
)
from planexec.planning.planner import PlanDraft, Planner, Planning
from planexec.planning.replanner import (
    FunctionReplanner,
    PlannerReplanner,
    ReplanContext,
    Replanner,
    Revision,
)
from planexec.planning.router import Route, route
from planexec.planning.stream import PlanStream
from planexec.store import (
    PostgresRunStore,
    RunNotFoundError,
    RunStore,
    SqliteRunStore,
    StoreError,
    open_store,
)
from planexec.team.agent import agent_worker, run_single
from planexec.team.subteam import SubTeam
from planexec.usage import Budget, Usage
from planexec.workers.builtin_team import build_team
from planexec.workers.io import Output, Provenance, StepCall, WorkResult
from planexec.workers.registry import Registry
from planexec.workers.roles import builtin_roles
from planexec.workers.toolkit import default_toolkit
from planexec.workers.tools import Predicate, Tool, predicate, tool
from planexec.workers.worker import CriticWorker, RoleWorker, ToolWorker, Verdict, Worker

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
