"""The ``anthropic:`` provider: the Messages API through the official ``anthropic`` SDK.

Owns `AnthropicModel`. Imports ``anthropic`` lazily (with an install hint)
and only `errors`, `usage`, `secrets`, `models.base` and `models.profile` from planexec; never
the engine, planner or store. Its api key is registered as a secret.

Our records map to the Messages API like this: system messages become the
``system`` parameter; an assistant's tool calls become ``tool_use`` blocks;
``role="tool"`` messages become ``tool_result`` blocks in a user message
(consecutive ones merged, as the API wants all results of a turn together).

Structured output forces a call of one extra tool, ``final_answer``, whose
input schema is the output schema (wrapped in ``{"value": ...}`` when the
schema is not an object, since a tool's input must be one); the tool's
input, unwrapped, is the reply's JSON text and is validated against the
schema. Streamed, the tool's input arrives as partial JSON text deltas (of
the wire form: wrapped schemas stream the wrapper object too).

``temperature`` and ``seed`` are not sent: the SDK has no such parameters and
the API version it speaks rejects sampling parameters with HTTP 400.

Prompt caching: the API caches a prompt's prefix (tools, then system, then
messages) up to a block marked ``cache_control: {"type": "ephemeral"}`` (a
5-minute cache). The stable prefix is marked: the last of the request's own
tools, and the system block. A breakpoint is set only when the prefix up to
it is estimated (characters / 4) at `AnthropicModel.cache_min_tokens` or
more, since the API does not cache a shorter one (1024 tokens for most
models, 2048 for Haiku 3 and 3.5; some newer models need more and
ignore a shorter breakpoint without error, so erring low costs nothing).
The reply's ``cache_read_input_tokens`` and ``cache_creation_input_tokens``
are added to its ``input_tokens`` (which leaves them out) and counted as
`Usage.cached_input_tokens` and `Usage.cache_write_tokens`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import jsonschema

from planexec.errors import (
    ConfigError,
    ModelAuthError,
    ModelBadRequestError,
    ModelError,
    ModelOutputError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
)
from planexec.models.base import (
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    ensure_requests_allowed,
)
from planexec.models.profile import ModelProfile
from planexec.secrets import register_secret
from planexec.usage import Usage

__all__ = ["ANSWER_TOOL", "CACHE_MIN_ENV", "DEFAULT_MODEL", "AnthropicModel", "default_cache_min_tokens"]

_INSTALL_HINT = "install it with: pip install 'anthropic>=0.40' (or pip install 'planexec[anthropic]')"

DEFAULT_MODEL = "claude-sonnet-4-6"
ANSWER_TOOL = "final_answer"  # the tool a structured reply is forced through
CACHE_MIN_ENV = "PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS"  # overrides the model's default cache threshold

_EPHEMERAL = {"type": "ephemeral"}
_CHARS_PER_TOKEN = 4  # a rough estimate of English and JSON text; the threshold only decides whether to mark

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}


def _import_anthropic() -> Any:
    try:
        import anthropic
    except ImportError as e:
        raise ModelError(f"the anthropic: provider needs the anthropic SDK; {_INSTALL_HINT}", model="anthropic") from e
    return anthropic


def _wire_messages(messages: list[Message], model: str) -> tuple[str, list[dict[str, Any]]]:
    """The ``system`` text and the wire messages, same-role neighbours merged."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.content)
            continue
        if message.role == "tool":
            if not message.call_id:
                raise ModelBadRequestError(f"{model}: a tool message has no call_id to answer", model=model)
            role = "user"
            blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": message.call_id, "content": message.content}]
        else:
            role = message.role
            # the API rejects empty text blocks; a turn that only calls tools has none
            has_text = message.content or not message.tool_calls
            blocks = [{"type": "text", "text": message.content}] if has_text else []
            blocks += [{"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments} for call in message.tool_calls]
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), wire


def _wire_tool(tool: ToolDefinition) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description:
        wire["description"] = tool.description
    return wire


def default_cache_min_tokens(model: str) -> int:
    """The shortest prefix (in tokens) worth a cache breakpoint: 2048 for Haiku 3 and 3.5, else 1024."""
    return 2048 if model.startswith(("claude-3-haiku", "claude-3-5-haiku")) else 1024


def _estimated_tokens(*parts: Any) -> int:
    chars = sum(len(p) if isinstance(p, str) else len(json.dumps(p)) for p in parts)
    return chars // _CHARS_PER_TOKEN


def _mark_cached(kwargs: dict[str, Any], own_tools: int, min_tokens: int) -> None:
    """Put ``cache_control`` on the last of the caller's tools and on the system block, where the prefix is long enough.

    `own_tools` is how many of ``kwargs["tools"]`` are the request's own (the
    answer tool comes after them and changes with the output schema).
    """
    tools = kwargs.get("tools", [])
    if own_tools and _estimated_tokens(tools[:own_tools]) >= min_tokens:
        tools[own_tools - 1] = {**tools[own_tools - 1], "cache_control": dict(_EPHEMERAL)}
    system = kwargs.get("system")
    if system and _estimated_tokens(tools, system) >= min_tokens:
        kwargs["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]


def _input_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The forced tool's input schema for an output schema, and whether it is wrapped."""
    if schema.get("type") == "object":
        return schema, False
    inner = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    wrapper: dict[str, Any] = {"type": "object", "properties": {"value": inner}, "required": ["value"]}
    # keep "#/$defs/..." references resolvable from the new root
    wrapper.update({k: schema[k] for k in ("$defs", "definitions") if k in schema})
    return wrapper, True


def _retry_after(error: Exception) -> float | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or {}
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[header]) * scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


class AnthropicModel:
    """A Claude model behind the Anthropic Messages API, named ``"anthropic:<model>"``.

    ``api_key`` and ``base_url`` default to ``ANTHROPIC_API_KEY`` and
    ``ANTHROPIC_BASE_URL``; a missing key is a `ModelAuthError` when a call
    is made. ``timeout`` is per HTTP attempt (None: no limit); the SDK's own
    retries are off by default (``max_retries=0``) since `ManagedModel`
    retries. ``max_tokens`` is the reply limit unless a request sets one.
    ``http_client`` (an async client of the SDK's HTTP library, e.g. with a
    mock transport) is handed to the SDK unchanged. ``cache_min_tokens`` is
    the estimated prefix length from which a cache breakpoint is set
    (default: ``PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS``, else
    `default_cache_min_tokens`; see the module docstring).

    Usage is the server's exact count: input tokens (cache reads and writes
    included, and also counted apart), output tokens, one model call.
    Its `profile`: a capable model with native tool calls, structured
    output, compact plans and prompt caching.
    """

    profile = ModelProfile(compact_plans=True, prompt_caching=True)

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 60.0,
        max_retries: int = 0,
        http_client: Any = None,
        max_tokens: int = 4096,
        cache_min_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.name = f"anthropic:{model}"
        self.api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        register_secret(self.api_key, f"{self.name} api_key" if api_key else "ANTHROPIC_API_KEY")
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.http_client = http_client
        self.max_tokens = max_tokens
        if cache_min_tokens is None and os.environ.get(CACHE_MIN_ENV):
            try:
                cache_min_tokens = int(os.environ[CACHE_MIN_ENV])
            except ValueError:
                raise ConfigError(f"{CACHE_MIN_ENV} must be a whole number of tokens, not {os.environ[CACHE_MIN_ENV]!r}") from None
        self.cache_min_tokens = default_cache_min_tokens(model) if cache_min_tokens is None else cache_min_tokens

    def _sdk_client(self) -> Any:
        anthropic = _import_anthropic()
        if self.api_key is None:
            raise ModelAuthError(
                f"{self.name}: no API key for the anthropic: provider; set ANTHROPIC_API_KEY or pass api_key",
                model=self.name,
            )
        return anthropic.AsyncAnthropic(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=self.http_client,
        )

    def _server(self) -> str:
        return (self.base_url or "https://api.anthropic.com").rstrip("/")

    def _wire_request(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        """The SDK's keyword arguments for a request, and whether the output schema was wrapped."""
        system, messages = _wire_messages(request.messages, self.name)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.max_tokens,
            "messages": messages,
        }
        if system:
            kwargs["system"] = system
        tools = [_wire_tool(t) for t in request.tools]
        wrapped = False
        schema = request.output_schema
        if schema is not None:
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ModelBadRequestError(f"{self.name}: invalid output_schema: {e.message}", model=self.name) from e
            if any(t.name == ANSWER_TOOL for t in request.tools):
                raise ModelBadRequestError(
                    f"{self.name}: a tool is named {ANSWER_TOOL!r}, the name structured output needs", model=self.name
                )
            input_schema, wrapped = _input_schema(schema)
            description = "Give your final answer: the tool's input is the answer."
            tools.append({"name": ANSWER_TOOL, "description": description, "input_schema": input_schema})
            kwargs["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
        if tools:
            kwargs["tools"] = tools
        _mark_cached(kwargs, len(request.tools), self.cache_min_tokens)
        return kwargs, wrapped

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Any]:
        # One SDK client per call, closed after it: its connection pool belongs
        # to one event loop and callers may run each call in a loop of its own
        # (asyncio.run). A caller's own http_client is theirs to close.
        client = self._sdk_client()
        try:
            yield client
        finally:
            if self.http_client is None:
                await client.close()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one Messages API call and return its text, tool calls and exact usage."""
        ensure_requests_allowed(self.name)
        anthropic = _import_anthropic()
        kwargs, wrapped = self._wire_request(request)
        async with self._session() as client:
            try:
                message = await client.messages.create(**kwargs)
            except anthropic.APIError as e:
                raise self._map_error(anthropic, e) from e
        return self._response(message, request.output_schema, wrapped)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Stream one call: text deltas as they arrive, then the final `ModelResponse`.

        With an output schema the deltas are the forced tool's partial JSON,
        so a caller can parse the answer as it grows. The final response is
        what `complete` would have returned for the same reply.
        """
        ensure_requests_allowed(self.name)
        anthropic = _import_anthropic()
        kwargs, wrapped = self._wire_request(request)
        structured = request.output_schema is not None
        async with self._session() as client:
            try:
                async with client.messages.stream(**kwargs) as events:
                    async for event in events:
                        if event.type != "content_block_delta":
                            continue
                        delta = event.delta
                        if delta.type == "text_delta" and not structured:
                            yield ModelDelta(text=delta.text)
                        elif delta.type == "input_json_delta" and structured and delta.partial_json:
                            block = events.current_message_snapshot.content[event.index]
                            if getattr(block, "name", None) == ANSWER_TOOL:
                                yield ModelDelta(text=delta.partial_json)
                    message = await events.get_final_message()
            except anthropic.APIError as e:  # an HTTP error, or an error event mid-stream
                raise self._map_error(anthropic, e) from e
            except ValueError as e:  # the SDK could not parse a tool's streamed JSON input
                raise ModelBadRequestError(f"{self.name}: malformed streamed tool input: {e}", model=self.name) from e
        yield self._response(message, request.output_schema, wrapped)

    def _map_error(self, anthropic: Any, e: Exception) -> ModelError:
        status = getattr(e, "status_code", None)
        if status is not None and status < 400:
            status = None  # an error event inside a 200 stream: its type says what went wrong
        kind = getattr(e, "type", None)
        detail = getattr(e, "api_message", None) or getattr(e, "message", None) or str(e)
        what = f"{status}" if status is not None else str(kind or "error event")
        where = f"{self.name} at {self._server()}"
        fields: dict[str, Any] = {"model": self.name, "status": status, "retry_after": _retry_after(e)}
        if isinstance(e, anthropic.APITimeoutError):
            after = f" after {self.timeout:g}s" if self.timeout is not None else ""
            return ModelTimeoutError(f"{where}: timed out{after}", model=self.name)
        if isinstance(e, anthropic.APIConnectionError):
            return ModelServerError(f"{where}: connection failed: {detail}", model=self.name)
        if isinstance(e, anthropic.AuthenticationError | anthropic.PermissionDeniedError) or kind in (
            "authentication_error",
            "permission_error",
        ):
            return ModelAuthError(f"{where}: credentials refused ({what}): {detail}", **fields)
        if isinstance(e, anthropic.RateLimitError) or kind == "rate_limit_error":
            return ModelRateLimitError(f"{where}: rate limited ({what}): {detail}", **fields)
        if status == 408:
            return ModelTimeoutError(f"{where}: the server timed out (408): {detail}", **fields)
        if status == 529 or kind == "overloaded_error":
            return ModelServerError(f"{where}: overloaded ({what}): {detail}", **fields)
        if (status is not None and status >= 500) or kind in ("api_error", "timeout_error"):
            return ModelServerError(f"{where}: server error ({what}): {detail}", **fields)
        if status is not None:
            return ModelBadRequestError(f"{where}: request rejected ({what}): {detail}", **fields)
        return ModelServerError(f"{where}: {type(e).__name__} ({what}): {detail}", **fields)

    def _response(self, message: Any, schema: dict[str, Any] | None, wrapped: bool) -> ModelResponse:
        stop = message.stop_reason
        text = "".join(block.text for block in message.content if block.type == "text")
        if stop == "refusal":
            details = getattr(message, "stop_details", None)
            why = [getattr(details, "category", None), getattr(details, "explanation", None), text]
            reason = "; ".join(str(w) for w in why if w)
            raise ModelBadRequestError(
                f"{self.name}: the model refused the request (stop_reason 'refusal')" + (f": {reason}" if reason else ""),
                model=self.name,
            )
        calls = [self._tool_call(block) for block in message.content if block.type == "tool_use"]
        finish = _FINISH_REASONS.get(stop, stop)
        if schema is not None:
            answers = [c for c in calls if c.name == ANSWER_TOOL]
            calls = [c for c in calls if c.name != ANSWER_TOOL]
            text = self._structured(answers, schema, wrapped, stop)
            finish = "stop"  # the forced tool call is the answer, not a call for the caller to run
        usage = message.usage
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        used = Usage(
            input_tokens=(usage.input_tokens or 0) + read + written,  # the API's input_tokens leaves the cache's out
            output_tokens=usage.output_tokens or 0,
            model_calls=1,
            cached_input_tokens=read,
            cache_write_tokens=written,
        )
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=used,
            model=message.model or self.model,
            finish_reason=finish,
        )

    def _tool_call(self, block: Any) -> ToolCall:
        if not isinstance(block.input, dict):
            raise ModelBadRequestError(
                f"{self.name}: tool call {block.name!r} input is not a JSON object: {block.input!r}", model=self.name
            )
        return ToolCall(call_id=block.id, name=block.name, arguments=block.input)

    def _structured(self, answers: list[ToolCall], schema: dict[str, Any], wrapped: bool, stop: str | None) -> str:
        """The forced tool's input as JSON text, unwrapped and checked against the schema."""
        if stop in ("max_tokens", "model_context_window_exceeded"):
            # a cut-off input may still parse and even validate, minus its tail
            raise ModelBadRequestError(
                f"{self.name}: structured output was cut off (stop_reason {stop!r}); raise max_tokens",
                model=self.name,
            )
        if not answers:
            raise ModelBadRequestError(f"{self.name}: structured output expected a {ANSWER_TOOL!r} tool call, got none", model=self.name)
        data: Any = answers[0].arguments
        if wrapped:
            if "value" not in data:
                raise ModelBadRequestError(
                    f"{self.name}: structured output does not match output_schema: no 'value' in {data!r}"[:300],
                    model=self.name,
                )
            data = data["value"]
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as e:
            # the text goes with the error so the planner can send it back for repair
            raise ModelOutputError(
                f"{self.name}: structured output does not match output_schema: {e.message}", model=self.name, text=json.dumps(data)
            ) from e
        return json.dumps(data)
