"""The curated public API: exactly these names, each importable and documented."""

from __future__ import annotations

import inspect

import planexec

EXPECTED = {
    # plans
    "Plan", "Step", "RollbackPlan", "FailureAction", "Criterion", "PlanMapping", "load_foreign_plan",
    "parse_llmcompiler", "parse_rewoo",
    "check_plan", "validate_plan", "Problem",
    # workers and tools
    "Registry", "Tool", "tool", "Predicate", "predicate", "Worker", "ToolWorker", "RoleWorker",
    "StepCall", "WorkResult", "Output", "Provenance",
    # execution
    "Engine", "Run", "Approver", "Runner", "LocalRunner", "Checker", "CriteriaChecker", "Synthesizer", "FunctionSynthesizer",
    "RunResult", "RunStatus", "StepRecord", "StepState", "ErrorInfo", "ReplanRequest", "Usage",
    # events
    "Event", "parse_event", "RunStarted", "RunFinished", "StepReady", "StepStarted", "StepSucceeded",
    "StepFailed", "StepRetried", "StepRerouted", "StepSkipped", "StepCancelled",
    # errors
    "PlanexecError", "ConfigError", "PlanError", "PlanParseError", "PlanValidationError", "RegistryError", "ToolError",
    "ToolInputError", "ToolOutputError", "StepTimeoutError", "CheckFailedError", "RunError",
    "RunAbortedError", "RunCancelledError", "ReplanRequested", "ModelError", "ModelOutputError", "PlanningError",
    # planning, models and teams
    "Planner", "Planning", "PlanDraft", "PlanStream", "PlanDrafted", "PlanStepParsed", "PlanCompleted",
    "ModelSettings", "ModelChoice", "resolve_model", "Price", "PriceTable",
    "build_team", "builtin_roles", "default_toolkit", "CriticWorker", "Verdict",
    # monitoring, replanning and hierarchy
    "CriticCriterion", "Replanner", "PlannerReplanner", "FunctionReplanner", "ReplanContext", "Revision",
    "Joiner", "ModelJoiner", "FunctionJoiner", "JoinContext", "JoinDecision", "JoinerError",
    "PlanVersion", "PlanDiff", "diff_plans", "SubTeam", "Budget",
    "ReplanStarted", "PlanRevised", "StepJudged", "JoinerDecided", "SubRunEvent",
    # the single agent and the router
    "run_single", "agent_worker", "route", "Route",
    # review and policies
    "Policy", "PolicyVerdict", "Review", "policy", "review_plan", "PolicySet", "load_policies",
    "MaxSteps", "MaxEstimatedCost", "ToolsNeedPerson", "ForbidTools", "RequiresOrder", "RiskEscalation",
    # durable runs
    "RunStore", "SqliteRunStore", "PostgresRunStore", "open_store", "StoreError", "RunNotFoundError",
    "record_run", "DurableRunner", "ResumeError", "resolve_step", "RunResumed", "StepResolved",
    "StoreApprover", "PlanApprover", "ApprovalRequested", "ApprovalDecided", "RollbackStarted", "RollbackFinished",
    # the plan library
    "save_run_template", "instantiate", "TemplateError",
}  # fmt: skip


def test_all_is_exactly_the_curated_api():
    assert set(planexec.__all__) == EXPECTED
    assert len(planexec.__all__) == len(set(planexec.__all__))
    assert planexec.__all__ == sorted(planexec.__all__, key=str)


def test_every_public_name_exists_and_classes_and_functions_are_documented():
    for name in planexec.__all__:
        obj = getattr(planexec, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_star_import_gives_only_the_public_api():
    ns: dict[str, object] = {}
    exec("from planexec import *", ns)
    assert {k for k in ns if not k.startswith("__")} == EXPECTED
