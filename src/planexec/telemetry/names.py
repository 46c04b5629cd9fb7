"""The attribute names planexec's spans carry: OpenTelemetry's GenAI semantic conventions, then our own.

Owns the names only, in one place the span builders, the tests and the docs
share. The GenAI conventions are still in development: these follow their
registry as of semantic-conventions v1.41 (``gen_ai.provider.name``, which
replaced ``gen_ai.system`` in v1.37; ``gen_ai.usage.cache_read.input_tokens``
and ``gen_ai.usage.cache_creation.input_tokens``; the ``invoke_workflow``
operation). Ours start with ``planexec.``. Imports nothing.
"""

from __future__ import annotations

__all__ = [
    "ACTION",
    "AGENT_NAME",
    "ATTEMPT",
    "CACHE_READ_TOKENS",
    "CACHE_WRITE_TOKENS",
    "COST",
    "DEPTH",
    "ERROR_RULE",
    "ERROR_TYPE",
    "FINISH_REASONS",
    "INPUT_MESSAGES",
    "INPUT_TOKENS",
    "MAX_TOKENS",
    "OPERATION",
    "OUTPUT",
    "OUTPUT_MESSAGES",
    "OUTPUT_TOKENS",
    "OUTPUT_TYPE",
    "PARENT_RUN",
    "PARENT_STEP",
    "PLAN_ID",
    "PLAN_VERSION",
    "PROVIDER",
    "REQUEST_MODEL",
    "RESPONSE_MODEL",
    "RESUMED",
    "RESUMES",
    "RUN_ID",
    "RUN_STATUS",
    "SEED",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "STEP_ID",
    "STEP_STATUS",
    "SYSTEM_INSTRUCTIONS",
    "TEMPERATURE",
    "TOOL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "TOOL_RESULT",
    "TOOL_TYPE",
    "UNPRICED",
    "USAGE",
    "WORKER",
    "WORKFLOW",
]

# GenAI semantic conventions
OPERATION = "gen_ai.operation.name"  # chat, execute_tool, invoke_agent, invoke_workflow
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TEMPERATURE = "gen_ai.request.temperature"
MAX_TOKENS = "gen_ai.request.max_tokens"
SEED = "gen_ai.request.seed"
OUTPUT_TYPE = "gen_ai.output.type"
INPUT_TOKENS = "gen_ai.usage.input_tokens"  # every prompt token, the cached ones included
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
WORKFLOW = "gen_ai.workflow.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
# opt-in content: only with capture_content
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
# general conventions
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

# planexec's own
RUN_ID = "planexec.run_id"
STEP_ID = "planexec.step_id"
ATTEMPT = "planexec.attempt"
COST = "planexec.cost_usd"  # a model call's cost in US dollars, when its model has a price
UNPRICED = "planexec.unpriced"  # true on a model call whose model has no price
WORKER = "planexec.worker"
ACTION = "planexec.action"
PLAN_ID = "planexec.plan_id"
PLAN_VERSION = "planexec.plan.version"
RUN_STATUS = "planexec.run.status"
STEP_STATUS = "planexec.step.status"
DEPTH = "planexec.run.depth"
PARENT_RUN = "planexec.parent_run_id"
PARENT_STEP = "planexec.parent_step_id"
RESUMED = "planexec.resumed"
RESUMES = "planexec.resumes"  # the traceparent of the run span a resumed run continues
ERROR_RULE = "planexec.error.rule"
OUTPUT = "planexec.output"  # a step's output (JSON), only with capture_content
USAGE = "planexec.usage."  # a step's, an attempt's or a run's totals: planexec.usage.input_tokens, ... (never gen_ai.usage.*)
