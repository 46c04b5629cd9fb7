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
    Event,
    PlanCompleted,
    PlanDrafted,
    PlanStepParsed,
    RunFinished,
    RunStarted,
    StepCancelled,
    StepFailed,
    StepReady,
    StepRerouted,
    StepRetried,
    StepSkipped,
    StepStarted,
    StepSucceeded,
    parse_event,
)
from .formats import parse_llmcompiler, parse_rewoo
from .mapping import PlanMapping, load_foreign_plan
from .models.providers import resolve_model
from .plan import Criterion, FailureAction, Plan, RollbackPlan, Step
from .plan_stream import PlanStream
from .planner import PlanDraft, Planner, Planning
from .pricing import Price, PriceTable
from .registry import Registry
from .results import (
    ErrorInfo,
    ReplanRequest,
    RunResult,
    RunStatus,
    StepRecord,
    StepState,
)
from .roles import builtin_roles
from .runner import LocalRunner, Runner
from .settings import ModelChoice, ModelSettings
from .synthesis import FunctionSynthesizer, Synthesizer
from .team import build_team
from .toolkit import default_toolkit
from .tools import Predicate, Tool, predicate, tool
from .usage import Usage
from .validation import check_plan, validate_plan
from .workers import CriticWorker, RoleWorker, ToolWorker, Verdict, Worker

__version__ = "0.1.0"

__all__ = [
    "Approver",
    "CheckFailedError",
    "Checker",
    "ConfigError",
    "CriteriaChecker",
    "Criterion",
    "CriticWorker",
    "Engine",
    "ErrorInfo",
    "Event",
    "FailureAction",
    "FunctionSynthesizer",
    "LocalRunner",
    "ModelChoice",
    "ModelError",
    "ModelOutputError",
    "ModelSettings",
    "Output",
    "Plan",
    "PlanCompleted",
    "PlanDraft",
    "PlanDrafted",
    "PlanError",
    "PlanMapping",
    "PlanParseError",
    "PlanStepParsed",
    "PlanStream",
    "PlanValidationError",
    "PlanexecError",
    "Planner",
    "Planning",
    "PlanningError",
    "Predicate",
    "Price",
    "PriceTable",
    "Problem",
    "Provenance",
    "Registry",
    "RegistryError",
    "ReplanRequest",
    "ReplanRequested",
    "RoleWorker",
    "RollbackPlan",
    "Run",
    "RunAbortedError",
    "RunCancelledError",
    "RunError",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "Runner",
    "Step",
    "StepCall",
    "StepCancelled",
    "StepFailed",
    "StepReady",
    "StepRecord",
    "StepRerouted",
    "StepRetried",
    "StepSkipped",
    "StepStarted",
    "StepState",
    "StepSucceeded",
    "StepTimeoutError",
    "Synthesizer",
    "Tool",
    "ToolError",
    "ToolInputError",
    "ToolOutputError",
    "ToolWorker",
    "Usage",
    "Verdict",
    "WorkResult",
    "Worker",
    "build_team",
    "builtin_roles",
    "check_plan",
    "default_toolkit",
    "load_foreign_plan",
    "parse_event",
    "parse_llmcompiler",
    "parse_rewoo",
    "predicate",
    "resolve_model",
    "tool",
    "validate_plan",
]
