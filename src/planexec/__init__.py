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

from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine, Run, check_run_id, new_run_id
from planexec.engine.results import RunResult, RunStatus, StepRecord, StepState
from planexec.errors import PlanexecError, Problem
from planexec.models.base import Model
from planexec.models.profile import ModelProfile
from planexec.models.providers import resolve_model
from planexec.plan.drafts import Planning
from planexec.plan.model import FailureAction, Plan, Step
from planexec.plan.validation import check_plan, validate_plan
from planexec.planning.planner import Planner
from planexec.team.settings import ModelOptions, PlanningOptions, ReviewOptions, Submission, Toolbox
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
    "ModelOptions",
    "ModelProfile",
    "Plan",
    "PlanexecError",
    "Planner",
    "Planning",
    "PlanningOptions",
    "Problem",
    "Registry",
    "ReviewOptions",
    "RoleWorker",
    "Run",
    "RunResult",
    "RunStatus",
    "Step",
    "StepCall",
    "StepRecord",
    "StepState",
    "SubTeam",
    "Submission",
    "Team",
    "Tool",
    "ToolContext",
    "Toolbox",
    "Usage",
    "Worker",
    "check_plan",
    "check_run_id",
    "new_run_id",
    "resolve_model",
    "tool",
    "validate_plan",
]
