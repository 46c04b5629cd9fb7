"""planexec's agent card: who it is, where it answers, how a caller authenticates, and its two skills.

Owns `agent_card` and the skill ids (`PLAN_GOAL`, `RUN_PLAN`). The card
says JSON-RPC at the server's URL, streaming, a bearer token, and input as
text or data (the request forms of `executor`), output as text or data
(the run's answer). Imports the a2a SDK's types (the ``a2a`` extra).
"""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from planexec import __version__

__all__ = ["BEARER", "PLAN_GOAL", "RUN_PLAN", "agent_card"]

PLAN_GOAL = "plan_goal"
RUN_PLAN = "run_plan"
BEARER = "bearer"
_MODES = ["text/plain", "application/json"]


def agent_card(url: str, *, name: str = "planexec", description: str | None = None) -> AgentCard:
    """The card served at ``/.well-known/agent-card.json`` for a server reachable at `url`."""
    return AgentCard(
        name=name,
        description=description
        or (
            "A planner-executor team: turns a goal into a typed, reviewed plan and runs it. A person approves every plan "
            "(the task is input-required until then); the caller cannot approve."
        ),
        version=__version__,
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description="planexec a2a --token-env")
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=[])})],
        default_input_modes=_MODES,
        default_output_modes=_MODES,
        skills=[
            AgentSkill(
                id=PLAN_GOAL,
                name="Plan and carry out a goal",
                description=(
                    "Send the goal as text (or data {'goal': ...}). planexec plans it (or reuses a saved plan), its policies "
                    "review the plan, and the task is input-required while a person approves it (planexec approve, the "
                    "console); it then runs, step by step as status updates, and completes with the run's answer."
                ),
                tags=["planning", "plan-and-execute", "approval"],
                examples=["What is 17 times 23, plus 5?", '{"goal": "Count the words in notes.txt"}'],
                input_modes=_MODES,
                output_modes=_MODES,
            ),
            AgentSkill(
                id=RUN_PLAN,
                name="Run an approved plan or a template",
                description=(
                    "Send data {'run_id': ...} to hand on a stored run that waits (it runs once a person approved it), or "
                    "{'template': NAME, 'parameters': {...}} to run a saved plan of the plan library; followed to its answer."
                ),
                tags=["templates", "plan-library", "runs"],
                examples=['{"template": "deploy", "parameters": {"version": "2.1.5"}}', '{"run_id": "mcp-20261129-0130-ab12"}'],
                input_modes=["application/json"],
                output_modes=_MODES,
            ),
        ],
    )
