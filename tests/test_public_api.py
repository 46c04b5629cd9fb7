"""The curated public API: exactly these names, each importable and documented."""

from __future__ import annotations

import inspect

import planexec

EXPECTED = {
    # the goal path, and what a team takes
    "Team", "ModelOptions", "Toolbox", "PlanningOptions", "ReviewOptions", "Submission", "new_run_id", "check_run_id",
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
        "ApprovalDecided", "ApprovalRequested", "Event", "JoinerDecided", "PlanCompleted", "PlanDrafted", "PlanRevised",
        "PlanStepParsed", "ReplanStarted", "RollbackFinished", "RollbackStarted", "RunFinished", "RunResumed", "RunStarted",
        "StepCancelled", "StepEscalated", "StepFailed", "StepJudged", "StepReady", "StepRerouted", "StepResolved", "StepRetried", "StepRouted", "StepScheduled", "StepSkipped",
        "StepStarted", "StepSucceeded", "SubRunEvent", "ToolCallDecided", "parse_event"
    },
    "policies": {
        "Approver", "ByDifficulty", "ByWorker", "CallRequest", "FirstModel", "FirstOf", "ForbidTools", "LearnedRouter",
        "LimitGrants", "MaxEstimatedCost", "MaxSteps", "ModelRouter", "PlanApprover", "Policy", "PolicyContext", "PolicySet",
        "PolicyVerdict", "RequireWindows", "RequiresOrder", "Review", "ReviewOutcome", "RiskEscalation", "RouteChoice",
        "StoreApprover", "ToolsNeedPerson", "approve_calls", "decide_review", "load_policies", "load_router", "narrow_plan",
        "person", "policy", "review_plan"
    },
    "store": {
        "Approval", "ApprovalError", "ApprovalState", "AuditProblem", "AuditReport", "DECISIONS", "DEFAULT_STORE",
        "DurableRunner", "EventConflictError", "PostgresRunStore", "ProblemKind", "ResumeError", "RunNotFoundError",
        "RunStore", "RunSummary", "RunView", "SCHEMA_VERSION", "STORE_ENV", "SqliteRunStore", "StoreCheck", "StoreError",
        "TamperedError", "Template", "TemplateNotFoundError", "check_store", "open_store", "record_run", "replay",
        "require_intact", "resolve_step", "sqlite_path", "store_target", "verify_run"
    },
    "stages": {
        "EventSeen", "Finished", "HandedOff", "Planned", "Queued", "ROUTINGS", "Reviewed", "Route", "Routed", "Stage", "Started", "WaitingForPerson"
    },
    "runs": {
        "Approval", "ApprovalState", "CallRecord", "ErrorInfo", "Lease", "ModelAttempt", "PlanEdit", "PlanVersion", "QueueState", "QueuedRun",
        "RunStatus", "RunSummary", "RunView", "StepRecord", "StepState", "describe_refused", "edit_plan", "find_edit",
        "in_thread", "pending_version", "redact", "replay", "run_setup", "run_to_end", "single_plan", "step_hash"
    },
    "plan": {
        "PlanDiff", "Window", "WindowError", "criterion_label", "diff_plans", "find_references", "grants_text", "parse_window",
        "plan_graph", "plan_table", "print_compact", "read_compact", "resolve_references", "when_text", "with_lines"
    },
    "library": {
        "LEFT_OUT", "PAIR_KINDS", "ReusePlanning", "TRAINING_FILES", "TemplateError", "TrainingFilter", "TrainingSet",
        "diff_templates", "export_templates", "export_training", "import_templates", "instantiate", "parse_values",
        "save_run_template", "training_set"
    },
    "fleet": {
        "PARK_AFTER", "FleetStore", "LocalWorker", "QueueWorker", "WorkerReport", "WorkerRun", "queue_store", "recorded_runner", "run_setup",
        "saved_plan_engine", "submit_plan", "tools_registry"
    },
    "models": {
        "AnthropicModel", "CAPABLE", "EMBEDDED", "LocalModel", "Message", "Model", "ModelDelta", "ModelProfile",
        "ModelRequest", "ModelResponse", "ModelSettings", "OpenAIModel", "PriceTable", "StreamingModel", "ToolCall",
        "ToolDefinition", "block_model_requests", "ensure_requests_allowed", "parse_model_name", "profile_of",
        "stream_response"
    },
    "config": {
        "A2aAgentConfig", "A2aConfig", "CONFIG_FILE", "Config", "ConfigError", "McpConfig", "McpServerConfig", "ProviderConfig", "RunnerConfig",
        "ServeConfig", "TelemetryConfig", "ToolResources", "load_config"
    },
    "telemetry": {
        "Telemetry", "TelemetrySettings", "TreeExporter", "active", "configure", "disable", "enable", "goal_scope",
        "render_tree", "resolve_settings", "run_scope", "start_run", "trace_run", "traced"
    },
    "scale": {
        "INSTALL_HINT", "RayRunner", "Runner", "remote_ref", "runner_for"
    },
    "eval": {
        "Contender", "EvalOptions", "EvalRecord", "INJECTION_SCENARIOS", "InjectionMode", "InjectionReport", "LatencyModel", "MODES",
        "PLANNER_VARIANTS", "PlannerSpec", "SuiteError", "TierModel", "configured_models", "goals_table", "load_suite", "parse_modes",
        "parse_planners", "ratio_notes", "run_injection_suite", "run_suite", "scripted_models", "summary_table", "write_report"
    },
    "testing": {
        "FunctionModel", "ManualClock", "ObedientModel", "ScriptExhaustedError", "ScriptedModel", "count_tokens", "scripted_tool",
        "sleep_tool", "tool_call"
    },
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
