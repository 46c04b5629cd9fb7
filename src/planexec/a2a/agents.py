"""Remote A2A agents as roles: each one a worker the planner plans to, with one action that sends it a message.

Owns `A2aAgentTool` (a `Tool` whose handler is one `exchange` with the
agent), `tool_name` (``NAME__send_message``) and `load` (each configured
agent joins a registry as a `ToolWorker` named after it, with its
description and skills as the planner's catalogue shows them).

A plan delegates a step to the agent ``billing`` like this::

    {"id": "ask", "worker": "billing", "action": "billing__send_message",
     "parameters": {"message": "What was invoice 4411's total?"}}

The agent's answer is untrusted output: whatever the agent says of itself,
its text comes from outside, so the step that reads it is quarantined like
one that read a web page (`Tool(untrusted_output=True)`; a later
side-effecting call whose argument comes from it is refused unless the
reviewed plan bounded it). It reaches the `network`, and sending a message
is an effect (not read-only): a worker that has read untrusted text cannot
send one on its own. The usage the agent reports joins the step's usage
(`usage.record_usage`). Its `timeout` (from its config) bounds one
exchange; the step's timeout and a cancelled run cancel the remote task
too (see `exchange`). Imports `config`, `errors`, `usage`, `workers` and
`a2a.exchange`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from planexec.a2a.exchange import exchange
from planexec.config import A2aAgentConfig
from planexec.errors import RegistryError, ToolError
from planexec.usage import record_usage
from planexec.workers.registry import Registry
from planexec.workers.tools import Tool
from planexec.workers.worker import ToolWorker

__all__ = ["ACTION", "A2aAgentTool", "load", "tool_name"]

ACTION = "send_message"
_INPUT = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "what to ask the agent, in words"},
        "data": {"type": "object", "description": "structured input for the agent, sent as a data part (optional)"},
    },
    "required": ["message"],
    "additionalProperties": False,
}


def tool_name(agent: str) -> str:
    """The action a plan names to message `agent`: ``agent__send_message``."""
    return f"{agent}__{ACTION}"


class A2aAgentTool(Tool):
    """The one action of a remote A2A agent's role: send it a message, wait for its answer (see the module docstring)."""

    def __init__(self, agent: str, config: A2aAgentConfig) -> None:
        self.agent = agent
        self.config = config
        name = tool_name(agent)

        async def send_message(message: str, data: dict[str, Any] | None = None) -> Any:
            token = _token(agent, config, name)
            reply = await exchange(agent, config, message, data=data, token=token, tool=name)
            if not reply.usage.is_zero():
                record_usage(reply.usage)
            return reply.output

        super().__init__(
            send_message,
            name=name,
            description=f"Send a message to the remote A2A agent {agent!r} ({config.url}) and return its answer (untrusted text).",
            read_only=False,
            untrusted_output=True,  # the agent's words come from outside, whatever it says of them
            network=True,
            input_schema=_INPUT,
        )

    def __repr__(self) -> str:
        return f"A2aAgentTool({self.agent!r}, {self.config.url!r})"


def _token(agent: str, config: A2aAgentConfig, tool: str) -> str | None:
    """The bearer token from the agent's `token_env`; `ToolError` naming the variable when it is unset."""
    if config.token_env is None:
        return None
    token = os.environ.get(config.token_env)
    if not token:
        raise ToolError(f"A2A agent {agent!r}: its token variable ${config.token_env} is not set", tool=tool)
    return token


def describe(agent: str, config: A2aAgentConfig) -> str:
    """What the planner reads of the agent's role."""
    text = config.description.strip() or f"A remote agent reached over A2A at {config.url}."
    if not text.endswith((".", "!", "?")):
        text += "."
    if config.skills:
        text += " Skills: " + "; ".join(config.skills) + "."
    return f"{text} Its answers are untrusted outside text. Action: {tool_name(agent)}(message, data?)."


def load(registry: Registry, agents: Mapping[str, A2aAgentConfig]) -> list[A2aAgentTool]:
    """Each agent of `agents` joins `registry` as a role of its own name; `RegistryError` for a name already taken.

    Nothing is contacted: an agent's card is read when a step first messages it.
    """
    added = []
    for agent, config in agents.items():
        if agent in registry.workers:
            raise RegistryError(f"A2A agent {agent!r}: a worker named {agent!r} is already registered", name=agent)
        tool = A2aAgentTool(agent, config)
        registry.add_worker(ToolWorker(agent, [], description=describe(agent, config)))
        registry.add_tool(tool, worker=agent)
        added.append(tool)
    return added
