"""The ``openai:`` provider: the Chat Completions API through the official ``openai`` SDK.

Owns `OpenAIModel`. The same provider reaches OpenAI and OpenAI-compatible
servers (vLLM, Ollama, LM Studio, llama.cpp's ``python -m llama_cpp.server``)
through ``base_url``. Imports ``openai`` lazily (with an install hint) and
only `errors`, `usage` and `models.base` from planexec; never the engine,
planner or store.

Structured output is negotiated per server. Three ``response_format`` modes
are tried, strongest first, and the one that worked is remembered per base
URL for the life of the process (`_schema_modes`):

1. ``json_schema`` - OpenAI's JSON Schema mode;
2. ``json_object_schema`` - ``{"type": "json_object", "schema": ...}``, which
   llama.cpp's server accepts and then constrains decoding to the schema
   (it answers mode 1 with HTTP 500 "Input should be 'text' or 'json_object'");
3. ``json_object`` - plain JSON mode, the schema given in a system message.

Whatever the mode, the reply is validated against the schema.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema

from ..errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
)
from ..usage import Usage
from .base import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    ensure_requests_allowed,
)

__all__ = ["SCHEMA_MODES", "OpenAIModel"]

_INSTALL_HINT = "install it with: pip install 'openai>=1.40' (or pip install 'planexec[openai]')"

SCHEMA_MODES = ("json_schema", "json_object_schema", "json_object")

# base URL -> the structured-output mode that server accepted
_schema_modes: dict[str, str] = {}


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

    Usage is the server's exact ``prompt_tokens`` / ``completion_tokens``.
    A server that sends no usage is counted as 0 tokens (one model call):
    nothing is estimated.
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
        self.timeout = timeout
        self.max_retries = max_retries
        self.http_client = http_client

    def _sdk_client(self) -> Any:
        openai = _import_openai()
        api_key = self.api_key
        if api_key is None:
            if self.base_url is None:
                raise ModelAuthError(
                    f"{self.name}: no API key; set OPENAI_API_KEY or pass api_key "
                    "(servers on your own machine accept any key)",
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
        # One SDK client per call, closed after it: its connection pool belongs
        # to one event loop and callers may run each call in a loop of its own
        # (asyncio.run). A caller's own http_client is theirs to close.
        client = self._sdk_client()
        try:
            return await self._complete(client, request)
        finally:
            if self.http_client is None:
                await client.close()

    async def _complete(self, client: Any, request: ModelRequest) -> ModelResponse:
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
        if request.output_schema is None:
            raw = await self._create(client, kwargs)
            return self._response(raw, None)
        return await self._structured(client, kwargs, request.output_schema)

    async def _structured(self, client: Any, kwargs: dict[str, Any], schema: dict[str, Any]) -> ModelResponse:
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
                raw = await self._create(client if known else client.with_options(max_retries=0), attempt)
            except (ModelBadRequestError, ModelServerError) as e:
                if last or not _rejects_response_format(e):
                    raise
                continue
            _schema_modes[key] = mode
            return self._response(raw, schema)
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

    def _response(self, raw: Any, schema: dict[str, Any] | None) -> ModelResponse:
        if not raw.choices:
            raise ModelServerError(f"{self.name}: the server returned no choices", model=self.name)
        choice = raw.choices[0]
        message = choice.message
        text = message.content or ""
        if schema is not None:
            self._validate(text, schema, choice.finish_reason)
        usage = raw.usage
        return ModelResponse(
            text=text,
            tool_calls=[self._tool_call(c) for c in (message.tool_calls or [])],
            usage=Usage(
                input_tokens=(usage.prompt_tokens or 0) if usage else 0,
                output_tokens=(usage.completion_tokens or 0) if usage else 0,
                model_calls=1,
            ),
            model=raw.model or self.model,
            finish_reason=choice.finish_reason,
        )

    def _tool_call(self, call: Any) -> ToolCall:
        function = getattr(call, "function", None)
        if function is None:
            raise ModelBadRequestError(
                f"{self.name}: unsupported tool call type {getattr(call, 'type', None)!r}", model=self.name
            )
        try:
            arguments = json.loads(function.arguments) if function.arguments else {}
        except json.JSONDecodeError as e:
            raise ModelBadRequestError(
                f"{self.name}: tool call {function.name!r} has malformed JSON arguments: {e}: {function.arguments!r}",
                model=self.name,
            ) from e
        if not isinstance(arguments, dict):
            raise ModelBadRequestError(
                f"{self.name}: tool call {function.name!r} arguments are not a JSON object: {function.arguments!r}",
                model=self.name,
            )
        return ToolCall(call_id=call.id, name=function.name, arguments=arguments)

    def _validate(self, text: str, schema: dict[str, Any], finish_reason: str | None) -> None:
        cut = " (the reply was cut off by max_tokens)" if finish_reason == "length" else ""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ModelBadRequestError(
                f"{self.name}: structured output is not JSON{cut}: {e}: {text[:200]!r}", model=self.name
            ) from e
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as e:
            raise ModelBadRequestError(
                f"{self.name}: structured output does not match output_schema{cut}: {e.message}", model=self.name
            ) from e


def _rejects_response_format(error: ModelError) -> bool:
    # A 4xx is the server refusing the request; a 5xx counts only when it
    # names the response format (llama.cpp's server answers 500 for it).
    if isinstance(error, ModelBadRequestError):
        return True
    text = str(error).lower()
    return "response_format" in text or "json_schema" in text
