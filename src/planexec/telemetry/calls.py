"""A span per model call: ``chat <model>``, with the GenAI semantic conventions' attributes.

Owns `ModelSpans`, the `models.observe.CallObserver` telemetry installs.
Each call's span goes under the attempt whose call it is (or the run, or
the span current where the call was made: the planner's, before the run
exists), found through the `kit.SpanIndex`. It carries the operation
(``chat``), the provider (``openai``, ``anthropic``, ``llama.cpp`` for
``local:``, else the name's prefix), the request's model and settings, the
server an OpenAI-compatible endpoint is at, the response's model and
finish reason, its input, output and cached tokens, its cost as
``planexec.cost_usd`` (``planexec.unpriced`` when the model has no price),
the run, step and attempt ids, each retry as an event, and on failure an
ERROR status with the error's type. The messages and the reply go in only
with `capture_content` (``gen_ai.system_instructions``,
``gen_ai.input.messages``, ``gen_ai.output.messages``, as JSON, secrets
redacted). Imports `models`, `secrets` and `telemetry` (`names`, `kit`).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

from planexec.models.base import Message, ModelRequest, ModelResponse, ToolCall
from planexec.models.observe import CallWatch
from planexec.secrets import redact
from planexec.telemetry import names as n
from planexec.telemetry.kit import SCOPE, Kit, Open, content

__all__ = ["ModelSpans", "provider_name"]

# the providers our model names start with, as the conventions name them
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "local": "llama.cpp"}


def provider_name(model: str) -> str:
    """``gen_ai.provider.name`` of a ``"provider:model"`` name."""
    prefix = model.split(":", 1)[0] if ":" in model else model
    return PROVIDERS.get(prefix, prefix)


class ModelSpans:
    """Opens a span as each model call starts and ends it with the call (see the module docstring)."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit

    def started(self, model: str, request: ModelRequest, *, base_url: str | None = None) -> CallWatch:
        """A call starts: its span, under the attempt (or run) it belongs to."""
        kit = self.kit
        where = kit.index.current()
        attrs: dict[str, Any] = {
            n.OPERATION: "chat",
            n.PROVIDER: provider_name(model),
            n.REQUEST_MODEL: model.split(":", 1)[1] if ":" in model else model,
            n.OUTPUT_TYPE: "json" if request.output_schema is not None else "text",
        }
        for key, value in ((n.TEMPERATURE, request.temperature), (n.MAX_TOKENS, request.max_tokens), (n.SEED, request.seed)):
            if value is not None:
                attrs[key] = value
        if base_url:
            parts = urlsplit(base_url)
            if parts.hostname:
                attrs[n.SERVER_ADDRESS] = parts.hostname
                attrs[n.SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
        if where is not None:
            attrs[n.RUN_ID] = where.run_id
            if where.step_id is not None:
                attrs[n.STEP_ID] = where.step_id
                attrs[n.ATTEMPT] = where.attempt
        else:
            scope = SCOPE.get()
            if scope is not None and scope.run_id:
                attrs[n.RUN_ID] = scope.run_id
        if kit.capture:
            attrs.update(_request_content(request))
        parent = kit.in_context(where.span) if where is not None else None  # None: the current context
        span = kit.tracer.start_span(f"chat {attrs[n.REQUEST_MODEL]}", context=parent, kind=kit.trace.SpanKind.CLIENT, attributes=attrs)
        return _CallSpan(kit, span, where)


class _CallSpan:
    """One call's span: retries as events, the response's attributes, the end."""

    def __init__(self, kit: Kit, span: Any, where: Open | None) -> None:
        self.kit = kit
        self.span = span
        self.where = where

    def retried(self, error: BaseException, delay: float) -> None:
        """A retryable failure: an event, then the call goes on."""
        self.span.add_event(
            "retry", {n.ERROR_TYPE: type(error).__name__, "planexec.delay_s": delay, "exception.message": redact(str(error))[:500]}
        )

    def ended(self, response: ModelResponse | None, error: BaseException | None) -> None:
        """The call ended: its response's attributes, or its error."""
        span = self.span
        if response is not None:
            span.set_attributes(_response_attributes(response))
            if self.kit.capture:
                span.set_attribute(n.OUTPUT_MESSAGES, _output_messages(response))
        elif error is not None:
            kind = "cancelled" if isinstance(error, GeneratorExit) or type(error).__name__ == "CancelledError" else type(error).__name__
            self.kit.error(span, str(error) or kind, kind)
        span.end()
        if self.where is not None:
            self.where.mark_ns = max(self.where.mark_ns, time.time_ns())  # a tool call it asked for runs after it


def _response_attributes(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    attrs: dict[str, Any] = {
        n.INPUT_TOKENS: usage.input_tokens,
        n.OUTPUT_TOKENS: usage.output_tokens,
        n.CACHE_READ_TOKENS: usage.cached_input_tokens,
    }
    if usage.cache_write_tokens:
        attrs[n.CACHE_WRITE_TOKENS] = usage.cache_write_tokens
    if response.model:
        attrs[n.RESPONSE_MODEL] = response.model
    if response.finish_reason:
        attrs[n.FINISH_REASONS] = [response.finish_reason]
    if usage.unpriced_calls:
        attrs[n.UNPRICED] = True
    else:
        attrs[n.COST] = usage.cost
    return attrs


def _parts(message: Message) -> list[dict[str, Any]]:
    """A message's parts in the conventions' message schema."""
    if message.role == "tool":
        return [{"type": "tool_call_response", "id": message.call_id, "result": content(message.content)}]
    parts: list[dict[str, Any]] = [{"type": "text", "content": content(message.content)}] if message.content else []
    return parts + [_tool_call(call) for call in message.tool_calls]


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.call_id, "name": call.name, "arguments": redact(call.arguments)}


def _request_content(request: ModelRequest) -> dict[str, str]:
    system = [{"type": "text", "content": content(m.content)} for m in request.messages if m.role == "system"]
    messages = [{"role": m.role, "parts": _parts(m)} for m in request.messages if m.role != "system"]
    out = {n.INPUT_MESSAGES: json.dumps(messages, ensure_ascii=False, default=str)}
    if system:
        out[n.SYSTEM_INSTRUCTIONS] = json.dumps(system, ensure_ascii=False)
    return out


def _output_messages(response: ModelResponse) -> str:
    parts: list[dict[str, Any]] = [{"type": "text", "content": content(response.text)}] if response.text else []
    parts += [_tool_call(call) for call in response.tool_calls]
    message = {"role": "assistant", "parts": parts, "finish_reason": response.finish_reason or "stop"}
    return json.dumps([message], ensure_ascii=False, default=str)
