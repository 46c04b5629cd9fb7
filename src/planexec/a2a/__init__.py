"""Remote A2A agents as workers: each configured agent is a role the planner may plan to, its answers untrusted.

The agents come from ``[planexec.a2a.agents.NAME]`` in planexec.toml
(`Team` and the commands load them), or from Python::

    from planexec import Registry
    from planexec.a2a import A2aAgentConfig, load

    registry = Registry.default()
    load(registry, {"billing": A2aAgentConfig(url="http://127.0.0.1:8767")})

A step names the role and its one action, ``NAME__send_message`` with a
``message`` (see `planexec.a2a.agents`); `exchange` sends it and follows
the agent's task to its end. Needs the a2a SDK (``pip install
'planexec[a2a]'``), imported only when a step first calls an agent.
Serving planexec itself over A2A is ``planexec a2a`` (`planexec.a2a_server`).
"""

from planexec.a2a.agents import ACTION, A2aAgentTool, load, tool_name
from planexec.a2a.exchange import Reply, exchange
from planexec.config import A2aAgentConfig

__all__ = ["ACTION", "A2aAgentConfig", "A2aAgentTool", "Reply", "exchange", "load", "tool_name"]
