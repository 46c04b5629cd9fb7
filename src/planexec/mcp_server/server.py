"""The MCP server: planexec's main job as tools other agents and editors call, over stdio or streamable HTTP.

Owns `build_server` (an `mcp.server.mcpserver.MCPServer` whose tools call a
`Service`: ``plan_goal``, ``run_plan``, ``run_template``, ``show_run``,
``list_runs``, ``list_templates``, ``list_approvals``, ``decide_approval``,
and the resource ``planexec://runs/{run_id}``), the way a decision is made
(`decide_approval`), and serving: `serve_stdio`, `serve_http` (behind
`BearerToken`, which lets a request through only with the server's token).

Approvals stay with a person or a policy, never with the calling model.
No tool takes a decision as an argument: ``decide_approval`` names what to
decide, and the server asks the *user* of the client with an MCP
elicitation (``elicitation/create``: a form the client shows its user),
then records the answer under the server operator's name. A client that
cannot ask its user (it declared no elicitation capability) is refused,
pointed at ``planexec approve`` and the console; so is every client when
the server was started with ``decide=False`` (``planexec mcp
--no-decide``), for clients that let their model answer elicitations.

Every refusal (an unknown run, a missing parameter, a plan the planner
could not write) is a tool error with a message and no traceback; an
unexpected failure is one line in the log and a tool error naming it.
Imports the `mcp` SDK at the top (the face needs the ``mcp`` extra; the CLI
loads it inside ``planexec mcp``) and the face's `service` and `answers`.
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Awaitable
from typing import Annotated, Any, Literal, TypeVar

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from planexec.errors import PlanexecError
from planexec.mcp_server.answers import (
    ApprovalList,
    Decision,
    PlannedRun,
    RunDetails,
    RunList,
    StartedRun,
    TemplateList,
)
from planexec.mcp_server.service import RequestError, Service
from planexec.mcp_server.views import STATES
from planexec.runs import redact

__all__ = ["INSTRUCTIONS", "NO_DECISIONS", "BearerToken", "PersonsAnswer", "build_server", "serve_http", "serve_stdio"]

log = logging.getLogger("planexec.mcp_server")
T = TypeVar("T")

INSTRUCTIONS = (
    "planexec plans goals into typed plans that a person reviews, then runs them. plan_goal writes a plan and stores it "
    "as a waiting run (nothing runs); it runs once a person approves it (planexec approve RUN_ID, the web console, or "
    "decide_approval, which asks the user of this client, never the model), on a worker; run_template submits a saved "
    "plan the same way; run_plan hands a waiting run on and says what it waits for. show_run and list_runs follow runs; "
    "list_approvals shows what waits for a person."
)
NO_DECISIONS = (
    "decisions belong to a person: decide with planexec approve {run_id}{step} [--deny --reason TEXT], "
    "or in the web console (planexec serve)"
)
_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

RunId = Annotated[str, Field(description="the run's id, as plan_goal, run_template or list_runs gave it")]


class PersonsAnswer(BaseModel):
    """The form the client's user fills in: the decision is theirs."""

    decision: Literal["approve", "deny"] = Field(description="approve lets it run; deny stops it")
    reason: str = Field("", description="why (recorded with your decision)")


def build_server(service: Service, *, decide: bool = True) -> MCPServer[Any]:
    """The MCP server over `service`; `decide` False refuses every decision (see the module docstring)."""
    server: MCPServer[Any] = MCPServer("planexec", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(annotations=_WRITE)
    async def plan_goal(
        goal: Annotated[str, Field(description="what you want done, in words")],
        reuse: Annotated[bool, Field(description="let a fitting template of the plan library supply the plan")] = True,
    ) -> PlannedRun:
        """Plan a goal and store the plan for a person to review: its steps, content hash and the policies' verdicts.

        Nothing runs yet: the plan is stored as a run in the state
        'waiting_for_approval'. Once a person approves it (planexec approve
        RUN_ID, the console, or decide_approval) a worker runs it.
        """
        return await _answer(service.plan_goal(goal, reuse=reuse))

    @server.tool(annotations=_WRITE)
    async def run_plan(run_id: RunId) -> StartedRun:
        """Hand on a run that plan_goal stored: a worker runs it once a person approves its plan (at once if one has).

        Says what the run waits for. The run is the store's: it goes on if
        this server stops. Steps and tool calls that need approval wait for
        a person too.
        """
        return await _answer(service.run_plan(run_id))

    @server.tool(annotations=_WRITE)
    async def run_template(
        name: Annotated[str, Field(description="the template's name (list_templates)")],
        parameters: Annotated[dict[str, Any] | None, Field(description="a value for each parameter the template declares")] = None,
        version: Annotated[int | None, Field(description="a version of the template (default: the latest)")] = None,
    ) -> StartedRun:
        """Run a saved plan of the plan library with these parameters: stored as a waiting run; it runs once a person approves it."""
        return await _answer(service.run_template(name, parameters or {}, version))

    @server.tool(annotations=_READ)
    async def show_run(run_id: RunId) -> RunDetails:
        """A run: its state, plan, each step's state and output, what waits for a person, its answer and usage."""
        return await _answer(service.show_run(run_id))

    @server.tool(annotations=_READ)
    async def list_runs(
        state: Annotated[str | None, Field(description=f"only runs in this state: {', '.join(STATES)}")] = None,
        limit: Annotated[int, Field(description="at most this many, newest first")] = 20,
    ) -> RunList:
        """The newest runs of the run store."""
        return await _answer(service.list_runs(state, limit))

    @server.tool(annotations=_READ)
    async def list_templates() -> TemplateList:
        """The plan library: each template's name, latest version, parameters and goal."""
        return await _answer(service.list_templates())

    @server.tool(annotations=_READ)
    async def list_approvals(
        run_id: Annotated[str | None, Field(description="only this run's (default: every run's)")] = None,
    ) -> ApprovalList:
        """What waits for a person: plan versions, steps and tool calls, each with the command that decides it."""
        return await _answer(service.list_approvals(run_id))

    @server.tool(annotations=_WRITE)
    async def decide_approval(
        run_id: RunId,
        ctx: Context[Any, Any],
        step_id: Annotated[str | None, Field(description="the step (default: the plan's pending version)")] = None,
    ) -> Decision:
        """Ask the person using this client to approve or deny what waits in a run; the model cannot decide.

        The client shows its user a form (an MCP elicitation); their answer is
        recorded as a person's decision. A client that cannot ask its user is
        refused: the person decides with planexec approve, or in the console.
        """
        return await _answer(_decide(service, ctx, run_id, step_id, allowed=decide))

    @server.resource("planexec://runs/{run_id}", name="run", description="a run as show_run gives it", mime_type="application/json")
    async def run_resource(run_id: str) -> str:
        """The run as JSON (show_run's answer)."""
        try:
            details = await service.show_run(run_id)
        except RequestError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        return details.model_dump_json(indent=2)

    return server


async def _decide(service: Service, ctx: Context[Any, Any], run_id: str, step_id: str | None, *, allowed: bool) -> Decision:
    """The person's decision on the pending request, asked through the client (see the module docstring)."""
    step = f" --step {step_id}" if step_id else ""
    refusal = NO_DECISIONS.format(run_id=run_id, step=step)
    if not allowed:
        raise RequestError(f"this server was started with --no-decide: {refusal}")
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        raise RequestError(f"this client cannot ask its user (it offers no MCP elicitation), and the model may not decide: {refusal}")
    pending = await service.pending_approval(run_id, step_id)
    message = (
        f"planexec asks you, the person using this client (not the model): approve or deny {pending.what} of run {run_id}?\n"
        f"{pending.details}\nYour answer is recorded as a decision by {service.user}."
    )
    try:
        answer = await ctx.elicit(message, PersonsAnswer)
    except Exception as exc:  # the client could not show the form (no back-channel, a bad reply): nothing was decided
        raise RequestError(f"the client could not ask its user ({type(exc).__name__}: {exc}); nothing was decided: {refusal}") from None
    if answer.action != "accept":
        return Decision(
            run_id=run_id, what=pending.what, state="undecided", next=f"nothing was decided (the person chose {answer.action}); {refusal}"
        )
    client = getattr(getattr(getattr(ctx.session, "client_params", None), "client_info", None), "name", None) or "an MCP client"
    reason = f"decided in {client} (MCP elicitation)" + (f": {answer.data.reason}" if answer.data.reason else "")
    return await service.decide(pending, approved=answer.data.decision == "approve", reason=reason)


async def _answer(work: Awaitable[T]) -> T:
    """`work`'s answer; a refusal or a failure becomes a tool error with a one-line message (secrets hidden), never a traceback."""
    try:
        return await work
    except RequestError as exc:
        raise ToolError(redact(str(exc))) from None
    except PlanexecError as exc:  # a store that failed, a model that failed: named, not a crash
        raise ToolError(redact(f"{type(exc).__name__}: {exc}")) from None
    except Exception as exc:
        log.error("planexec MCP tool failed: %s: %s", type(exc).__name__, exc)
        log.debug("the failure in full", exc_info=True)
        raise ToolError(redact(f"planexec failed unexpectedly: {type(exc).__name__}: {exc}")) from None


def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve over stdin and stdout until the client closes them."""
    server.run()


class BearerToken:
    """An ASGI app that lets an HTTP request reach `app` only with ``Authorization: Bearer TOKEN`` (401 otherwise)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token of an HTTP request; pass everything else (the lifespan) through."""
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                refused = PlainTextResponse(
                    "planexec mcp: this server needs its token: Authorization: Bearer TOKEN",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_http(server: MCPServer[Any], listening: socket.socket, *, host: str, token: str) -> None:
    """Serve streamable HTTP at ``/mcp`` on the bound socket `listening` until Ctrl-C; every request needs `token`.

    On a loopback `host` the SDK also checks the Host and Origin headers (no DNS rebinding from a web page).
    """
    app = BearerToken(server.streamable_http_app(host=host.strip("[]")), token)
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False)
    uvicorn.Server(config).run(sockets=[listening])
