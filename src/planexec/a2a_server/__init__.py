"""planexec as an A2A agent: other agents send it goals, templates or runs, and follow each as an A2A task.

``planexec a2a`` serves `server.build_app` on loopback, behind a bearer
token: the agent card (`card`: its skills are planning and carrying out a
goal, and running an approved plan or a template) and JSON-RPC, whose
tasks `executor.RunExecutor` works through the MCP server's `Service` (a
`Team` that plans, reviews and submits each plan to the run store's queue,
and the worker that runs approved runs from it). A task follows its run:
``input-required`` while a person must approve (the caller never can),
``working`` with a status update per step, then ``completed`` with the
answer, ``failed``, ``rejected`` or ``canceled``. Needs the ``a2a`` extra:
``pip install 'planexec[a2a]'``. Remote A2A agents used as workers are
`planexec.a2a`.
"""

from planexec.a2a_server.card import PLAN_GOAL, RUN_PLAN, agent_card
from planexec.a2a_server.executor import RunExecutor, RunRequest, parse_request, task_state
from planexec.a2a_server.server import BearerToken, build_app, serve

__all__ = [
    "PLAN_GOAL",
    "RUN_PLAN",
    "BearerToken",
    "RunExecutor",
    "RunRequest",
    "agent_card",
    "build_app",
    "parse_request",
    "serve",
    "task_state",
]
