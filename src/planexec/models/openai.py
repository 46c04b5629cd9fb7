"""The ``openai:`` provider: the Chat Completions API through the official ``openai`` SDK.

Owns `OpenAIModel`. The same provider reaches OpenAI and OpenAI-compatible
servers (vLLM, Ollama, LM Studio, llama.cpp's ``python -m llama_cpp.server``)
through ``base_url``. Imports ``openai`` lazily (with an install hint) and
only `errors`, `usage`, `secrets`, `models.base` and `models.profile` from planexec; never
the engine, planner or store. Its api key is registered as a secret.

Structured output is negotiated per server. Three ``response_format`` modes
are tried, strongest first, and the one that worked is remembered per base
URL for the life of the process (`_schema_modes`):

1. ``json_schema`` - OpenAI's JSON Schema mode;
2. ``json_object_schema`` - ``{"type": "json_object", "schema": ...}``, which
   llama.cpp's server accepts and then constrains decoding to the schema
   (it answers mode 1 with HTTP 500 "Input should be 'text' or 'json_object'");
3. ``json_object`` - plain JSON mode, the schema given in a system message.

Whatever the mode, the reply is validated against the schema.

`OpenAIModel.stream` sends the same request with ``stream=True`` and
``stream_options={"include_usage": True}``: text deltas are yielded as they
arrive, tool call fragments are joined by their ``index``, and the usage is
the one the server sends in its last chunk, so it is as exact as
``complete``'s. A server that ignores ``stream_options`` (llama-cpp-python's
``llama_cpp.server`` does) sends no usage at all; nothing exact is known
then, so the call is counted as one model call with 0 tokens, like a
``complete`` without usage, and a warning is logged once per server.
Counting chunks instead would be a guess: a chunk is not a token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import jsonschema

from planexec.errors import (
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

__all__ = ["SCHEMA_MODES", "OpenAIModel"]

_INSTALL_HINT = "install it with: pip install 'openai>=1.40' (or pip install 'planexec[openai]')"

SCHEMA_MODES = ("json_schema", "json_object_schema", "json_object")

# base URL -> the structured-output mode that server accepted
_schema_modes: dict[str, str] = {}
# base URLs already warned about streams without usage
_no_stream_usage: set[str] = set()

log = logging.getLogger("planexec.models.openai")


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as e:
        raise ModelError(f"the openai: provider needs the openai SDK; {_INSTALL_HINT}", model="openai") from e
    return openai


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.call_id or "", "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        # OpenAI wants null content, not "", on a turn that only calls tools
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _response_format(mode: str, schema: dict[str, Any]) -> dict[str, Any]:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_object"}


class OpenAIModel:
    """A chat model behind the OpenAI Chat Completions API, named ``"openai:<model>"``.

    ``base_url`` and ``api_key`` default to ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY``; a local server without a key gets a dummy one.
    ``timeout`` is per HTTP attempt. Retries with exponential backoff on
    rate limits (429), server errors (5xx), timeouts and connection errors
    are the SDK's own, ``max_retries`` times; the error left after the last
    attempt is mapped to a `ModelError` subclass that keeps the HTTP
    ``status``. ``http_client`` (an ``httpx`` async client, e.g. with a mock
    transport) is handed to the SDK unchanged.

    Usage is the server's exact ``prompt_tokens`` / ``completion_tokens``,
    with the prompt tokens its cache served (``prompt_tokens_details``) as
    `Usage.cached_input_tokens`. A server that sends no usage is counted as
    0 tokens (one model call): nothing is estimated. OpenAI caches a prompt
    of 1024 tokens or more by itself; nothing is sent to ask for it, so the
    callers keep their prompts' stable part first. `stream` yields text as it arrives (see the module
    docstring). Its `profile` is a capable model's, whatever the server:
    native tool calls, structured output, compact plans, and prompt caching
    on OpenAI's own API; a small model behind a server says so in
    planexec.toml (``[planexec.model_profiles]``).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        name: str | None = None,
        http_client: Any = None,
    ) -> None:
        self.model = model
        self.name = name or f"openai:{model}"
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        register_secret(self.api_key, f"{self.name} api_key" if api_key else "OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.http_client = http_client
        self.profile = ModelProfile(compact_plans=True, prompt_caching=self.base_url is None)

    def _sdk_client(self) -> Any:
        openai = _import_openai()
        api_key = self.api_key
        if api_key is None:
            if self.base_url is None:
                raise ModelAuthError(
                    f"{self.name}: no API key; set OPENAI_API_KEY or pass api_key (servers on your own machine accept any key)",
                    model=self.name,
                )
            api_key = "not-needed"  # local OpenAI-compatible servers ignore the key
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=self.http_client,
        )

    def schema_mode(self) -> str | None:
        """The structured-output mode remembered for this model's server, if any."""
        return _schema_modes.get(self._server_key())

    def _server_key(self) -> str:
        return (self.base_url or "https://api.openai.com/v1").rstrip("/")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one chat completion and return its text, tool calls and exact usage."""
        ensure_requests_allowed(self.name)
        async with self._session() as client:
            raw, schema = await self._open(client, request, stream=False)
            if not raw.choices:
                raise ModelServerError(f"{self.name}: the server returned no choices", model=self.name)
            choice = raw.choices[0]
            calls = []
            for call in choice.message.tool_calls or []:
                function = getattr(call, "function", None)
                if function is None:
                    raise ModelBadRequestError(f"{self.name}: unsupported tool call type {getattr(call, 'type', None)!r}", model=self.name)
                calls.append((call.id, function.name, function.arguments))
            return self._response(choice.message.content or "", calls, raw.usage, raw.model, choice.finish_reason, schema)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Stream one chat completion: text deltas as they arrive, then the whole `ModelResponse`.

        The final response is what `complete` returns for the same call: the
        whole text (validated against ``output_schema``), the tool calls
        assembled from their fragments, and the server's usage (see the
        module docstring for a server that sends none).
        """
        ensure_requests_allowed(self.name)
        openai = _import_openai()
        async with self._session() as client:
            chunks, schema = await self._open(client, request, stream=True)
            parts: list[str] = []
            calls: dict[int, list[str]] = {}  # index -> [call id, name, arguments so far]
            usage = model = finish_reason = None
            seen_choice = False
            try:
                async for chunk in chunks:
                    usage = chunk.usage or usage
                    model = chunk.model or model
                    for choice in chunk.choices or ():
                        if choice.index != 0:  # only one choice is ever asked for
                            continue
                        seen_choice = True
                        finish_reason = choice.finish_reason or finish_reason
                        delta = choice.delta
                        for fragment in delta.tool_calls or []:
                            call = calls.setdefault(fragment.index, ["", "", ""])
                            call[0] = fragment.id or call[0]
                            if fragment.function is not None:
                                # the name comes whole (some servers repeat it), arguments in pieces
                                call[1] = fragment.function.name or call[1]
                                call[2] += fragment.function.arguments or ""
                        if delta.content:
                            parts.append(delta.content)
                            yield ModelDelta(text=delta.content)
            except openai.APIError as e:  # an error event or a broken connection mid-stream
                raise self._map_error(openai, e) from e
            finally:
                await chunks.close()
            if not seen_choice:
                raise ModelServerError(f"{self.name}: the server returned no choices", model=self.name)
            if usage is None and self._server_key() not in _no_stream_usage:
                _no_stream_usage.add(self._server_key())
                log.warning(
                    "%s at %s sent no usage in a stream (stream_options ignored): its streamed calls count 0 tokens",
                    self.name,
                    self._server_key(),
                )
            tool_calls: list[tuple[str, str, str | None]] = [(c[0], c[1], c[2]) for c in (calls[index] for index in sorted(calls))]
            yield self._response("".join(parts), tool_calls, usage, model, finish_reason, schema)

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

    async def _open(self, client: Any, request: ModelRequest, *, stream: bool) -> tuple[Any, dict[str, Any] | None]:
        """Send the request; return the SDK's completion (or chunk stream) and the schema to validate against."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in request.messages],
        }
        if request.tools:
            kwargs["tools"] = [_wire_tool(t) for t in request.tools]
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        if request.output_schema is None:
            return await self._create(client, kwargs), None
        return await self._structured(client, kwargs, request.output_schema), request.output_schema

    async def _structured(self, client: Any, kwargs: dict[str, Any], schema: dict[str, Any]) -> Any:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ModelBadRequestError(f"{self.name}: invalid output_schema: {e.message}", model=self.name) from e
        key = self._server_key()
        known = _schema_modes.get(key)
        modes = [known] if known else list(SCHEMA_MODES)
        for mode in modes:
            attempt = dict(kwargs, response_format=_response_format(mode, schema))
            if mode == "json_object":
                # plain JSON mode knows no schema (and OpenAI wants "JSON" in the prompt)
                hint = f"Reply with one JSON object that validates against this JSON Schema:\n{json.dumps(schema)}"
                attempt["messages"] = [{"role": "system", "content": hint}, *kwargs["messages"]]
            last = mode == modes[-1]
            try:
                # An untried mode is probed once: a server that rejects it is not retried.
                # A stream is rejected the same way: the HTTP status comes before any chunk.
                raw = await self._create(client if known else client.with_options(max_retries=0), attempt)
            except (ModelBadRequestError, ModelServerError) as e:
                if last or not _rejects_response_format(e):
                    raise
                continue
            _schema_modes[key] = mode
            return raw
        raise AssertionError("unreachable")  # pragma: no cover - the last mode returns or raises

    async def _create(self, client: Any, kwargs: dict[str, Any]) -> Any:
        openai = _import_openai()
        try:
            return await client.chat.completions.create(**kwargs)
        except openai.APIError as e:
            raise self._map_error(openai, e) from e

    def _map_error(self, openai: Any, e: Exception) -> ModelError:
        status = getattr(e, "status_code", None)
        detail = getattr(e, "message", None) or str(e)
        where = f"{self.name} at {self._server_key()}"
        if isinstance(e, openai.APITimeoutError):
            return ModelTimeoutError(f"{where}: timed out after {self.timeout:g}s", model=self.name)
        if isinstance(e, openai.APIConnectionError):
            return ModelServerError(f"{where}: connection failed: {detail}", model=self.name)
        if isinstance(e, openai.AuthenticationError | openai.PermissionDeniedError):
            return ModelAuthError(f"{where}: credentials refused: {detail}", model=self.name, status=status)
        if isinstance(e, openai.RateLimitError):
            return ModelRateLimitError(f"{where}: rate limited: {detail}", model=self.name, status=status)
        if status is not None and status >= 500:
            return ModelServerError(f"{where}: server error {status}: {detail}", model=self.name, status=status)
        if status is not None and status >= 400:
            return ModelBadRequestError(f"{where}: request rejected ({status}): {detail}", model=self.name, status=status)
        return ModelServerError(f"{where}: {type(e).__name__}: {detail}", model=self.name, status=status)

    def _response(
        self,
        text: str,
        calls: list[tuple[str, str, str | None]],
        usage: Any,
        model: str | None,
        finish_reason: str | None,
        schema: dict[str, Any] | None,
    ) -> ModelResponse:
        """The response `complete` and `stream` both return; ``calls`` are (id, name, JSON arguments)."""
        used = _usage(usage)
        if schema is not None:
            self._validate(text, schema, finish_reason, used)
        return ModelResponse(
            text=text,
            tool_calls=[self._tool_call(*call) for call in calls],
            usage=used,
            model=model or self.model,
            finish_reason=finish_reason,
        )

    def _tool_call(self, call_id: str, name: str, arguments_json: str | None) -> ToolCall:
        try:
            arguments = json.loads(arguments_json) if arguments_json else {}
        except json.JSONDecodeError as e:
            raise ModelBadRequestError(
                f"{self.name}: tool call {name!r} has malformed JSON arguments: {e}: {arguments_json!r}",
                model=self.name,
            ) from e
        if not isinstance(arguments, dict):
            raise ModelBadRequestError(
                f"{self.name}: tool call {name!r} arguments are not a JSON object: {arguments_json!r}",
                model=self.name,
            )
        return ToolCall(call_id=call_id, name=name, arguments=arguments)

    def _validate(self, text: str, schema: dict[str, Any], finish_reason: str | None, usage: Usage) -> None:
        # ModelOutputError keeps the text and its usage: a caller that repairs (the planner) needs both
        cut = " (the reply was cut off by max_tokens)" if finish_reason == "length" else ""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ModelOutputError(
                f"{self.name}: structured output is not JSON{cut}: {e}: {text[:200]!r}", model=self.name, text=text, usage=usage
            ) from e
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as e:
            raise ModelOutputError(
                f"{self.name}: structured output does not match output_schema{cut}: {e.message}", model=self.name, text=text, usage=usage
            ) from e


def _usage(usage: Any) -> Usage:
    """One call's `Usage` from the server's: ``prompt_tokens`` include the ``prompt_tokens_details`` read from
    (``cached_tokens``) or written to (``cache_write_tokens``) the prompt cache, as `Usage` counts them.
    Servers that send no details (older OpenAI-compatible ones) count no cached tokens."""
    if usage is None:
        return Usage(model_calls=1)
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        model_calls=1,
        cached_input_tokens=getattr(details, "cached_tokens", None) or 0,
        cache_write_tokens=getattr(details, "cache_write_tokens", None) or 0,
    )


def _rejects_response_format(error: ModelError) -> bool:
    # A 4xx is the server refusing the request; a 5xx counts only when it
    # names the response format (llama.cpp's server answers 500 for it).
    if isinstance(error, ModelBadRequestError):
        return True
    text = str(error).lower()
    return "response_format" in text or "json_schema" in text
