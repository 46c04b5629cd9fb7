"""The curated public API: exactly these names, each importable and documented."""

from __future__ import annotations

import inspect

import planexec

EXPECTED = {
    # the goal path, and what a team takes
    "Team", "ModelOptions", "Toolbox", "PlanningOptions", "ReviewOptions", "Submission", "new_run_id",
    # plans
    "Plan", "Step", "FailureAction", "check_plan", "validate_plan", "Problem",
    # workers and tools
    "Registry", "Tool", "ToolContext", "tool", "Worker", "RoleWorker", "StepCall", "SubTeam",
    # execution
    "Engine", "EngineConfig", "Run", "RunResult", "RunStatus", "StepRecord", "StepState", "Usage", "Budget",
    # planning and models
    "Planner", "Planning", "Model", "ModelProfile", "resolve_model",
    # errors
    "PlanexecError",
}  # fmt: skip

SUBMODULES = {
    "events": {
        "Event", "parse_event", "RunStarted", "RunFinished", "RunResumed", "StepReady", "StepStarted", "StepSucceeded",
        "StepFailed", "StepRetried", "StepRerouted", "StepSkipped", "StepCancelled", "StepJudged", "StepResolved",
        "PlanDrafted", "PlanStepParsed", "PlanCompleted", "ReplanStarted", "PlanRevised", "JoinerDecided", "SubRunEvent",
        "ApprovalRequested", "ApprovalDecided", "RollbackStarted", "RollbackFinished", "ToolCallDecided",
    },
    "policies": {
        "Policy", "PolicyContext", "PolicyVerdict", "Review", "ReviewOutcome", "policy", "review_plan", "PolicySet",
        "load_policies", "MaxSteps", "MaxEstimatedCost", "ToolsNeedPerson", "ForbidTools", "RequiresOrder",
        "RiskEscalation", "Approver", "StoreApprover", "PlanApprover", "LimitGrants", "narrow_plan", "CallRequest",
        "approve_calls", "decide_review", "person",
    },
    "store": {
        "RunStore", "SqliteRunStore", "PostgresRunStore", "open_store", "store_target", "DEFAULT_STORE", "STORE_ENV",
        "SCHEMA_VERSION", "RunSummary", "RunView", "replay", "Approval", "ApprovalState", "Template", "StoreError",
        "RunNotFoundError", "EventConflictError", "ApprovalError", "TemplateNotFoundError", "record_run",
        "DurableRunner", "resolve_step", "ResumeError", "verify_run", "AuditReport", "AuditProblem", "ProblemKind", "sqlite_path",
    },
    "stages": {"EventSeen", "Finished", "Planned", "Queued", "Reviewed", "Routed", "Stage", "Started", "WaitingForPerson"},
    "runs": {
        "Approval", "ApprovalState", "ErrorInfo", "Lease", "PlanEdit", "PlanVersion", "QueueState", "QueuedRun", "RunStatus",
        "RunSummary", "RunView", "StepRecord", "StepState", "describe_refused", "edit_plan", "find_edit", "pending_version", "redact",
        "replay", "run_setup",
    },
    "plan": {
        "PlanDiff", "criterion_label", "diff_plans", "find_references", "plan_graph", "plan_table", "print_compact", "read_compact",
        "resolve_references", "with_lines",
    },
    "library": {"ReusePlanning", "TemplateError", "export_templates", "import_templates", "instantiate", "parse_values"},
    "fleet": {
        "FleetStore", "LocalWorker", "QueueWorker", "WorkerReport", "WorkerRun", "queue_store", "recorded_runner", "run_setup",
        "saved_plan_engine", "submit_plan", "tools_registry",
    },
    "testing": {"ScriptedModel", "FunctionModel", "ObedientModel", "ScriptExhaustedError", "count_tokens", "scripted_tool", "sleep_tool", "tool_call"},
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


def test_each_public_submodule_lists_exactly_its_api():
    import importlib

    for name, expected in SUBMODULES.items():
        module = importlib.import_module(f"planexec.{name}")
        assert set(module.__all__) == expected, name
        for public in module.__all__:
            assert hasattr(module, public), f"planexec.{name}.{public}"


def test_the_errors_submodule_lists_every_exception_it_defines():
    import planexec.errors as errors

    defined = {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, Exception) and v.__module__ == errors.__name__}
    assert defined <= set(errors.__all__)


def test_names_that_left_the_top_level_are_gone_not_deprecated():
    """0.1.0 was never released: the 122 names that moved to their homes have no aliases left to warn about."""
    import pytest

    with pytest.raises(ImportError, match="cannot import name 'MaxSteps' from 'planexec'"):
        from planexec import MaxSteps  # noqa: F401
    assert not hasattr(planexec, "__getattr__")
    with pytest.raises(AttributeError):
        planexec.NoSuchName  # noqa: B018
