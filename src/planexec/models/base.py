"""The model protocol: the one async call every provider implements.

Owns the wire-neutral records a model call exchanges (`Message`, `ToolCall`,
`ToolDefinition`, `ModelRequest`, `ModelResponse`) and the `Model` protocol.
Providers (one module each, next to this one) map these to their SDK.
Imports only `errors` and `usage`; never the engine, planner or store.

Real model requests can be switched off process-wide with
`block_model_requests()` (the test suite does this); providers call
`ensure_requests_allowed()` before touching the network.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from planexec.errors import ModelRequestsBlockedError
from planexec.usage import Usage

__all__ = [
    "Message",
    "Model",
    "ModelDelta",
    "ModelRequest",
    "ModelResponse",
    "StreamingModel",
    "ToolCall",
    "ToolDefinition",
    "block_model_requests",
    "ensure_requests_allowed",
    "stream_response",
]

_requests_allowed = os.environ.get("PLANEXEC_ALLOW_MODEL_REQUESTS", "1") not in ("0", "false", "no")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Record):
    """A model's request to call a tool."""

    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(_Record):
    """One chat message. Tool results are ``role="tool"`` with the `call_id` they answer."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    call_id: str | None = None


class ToolDefinition(_Record):
    """A tool offered to the model: name, description and JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(_Record):
    """Everything one call sends: messages, tools, an optional output JSON Schema or GBNF grammar."""

    messages: list[Message]
    tools: list[ToolDefinition] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    # a GBNF grammar the reply must match (a compact plan's), for a model that decodes under one (`LocalModel`):
    # others ignore it; an output schema, when both are given, wins
    grammar: str | None = None


class ModelResponse(_Record):
    """What came back: text and/or tool calls, exact usage, and the model's id."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None


class ModelDelta(_Record):
    """A piece of a streamed response: the text that arrived since the last delta."""

    text: str = ""


@runtime_checkable
class Model(Protocol):
    """A chat model named ``"provider:model"``."""

    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the whole response."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream.

    ``stream(request)`` is an async iterator of zero or more `ModelDelta`
    (text as it arrives) followed by exactly one `ModelResponse`: the whole
    text, any tool calls and the exact usage of the call. The final response
    equals what `complete` would have returned for the same call.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Send one request and yield deltas, then the final response."""
        ...


async def stream_response(model: Model, request: ModelRequest) -> AsyncGenerator[ModelDelta | ModelResponse, None]:
    """Stream from any model: its own `stream` when it has one, else one delta then the response."""
    if isinstance(model, StreamingModel):
        async for item in model.stream(request):
            yield item
        return
    response = await model.complete(request)
    if response.text:
        yield ModelDelta(text=response.text)
    yield response


def block_model_requests(blocked: bool = True) -> None:
    """Switch real model requests off (or back on) for this process."""
    global _requests_allowed
    _requests_allowed = not blocked


def ensure_requests_allowed(model: str) -> None:
    """Raise `ModelRequestsBlockedError` when real requests are switched off."""
    if not _requests_allowed:
        raise ModelRequestsBlockedError(
            f"real model requests are blocked (model {model!r}); use planexec.testing models or set PLANEXEC_ALLOW_MODEL_REQUESTS=1",
            model=model,
        )
