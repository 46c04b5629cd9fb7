"""Test doubles that ship with planexec, for our tests and yours.

Owns `ScriptedModel` (answers from a queue and records every request),
`FunctionModel` (your function plays the model), and helpers that build
tool workers for tests: `scripted_tool` (returns or raises from a script,
counting calls) and `sleep_tool`. No network, no randomness.
Imports `models.base`, `tools`, `usage` and `errors`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from planexec.errors import PlanexecError
from planexec.models.base import ModelDelta, ModelRequest, ModelResponse, ToolCall
from planexec.usage import Usage
from planexec.workers.tools import Tool

__all__ = ["FunctionModel", "ScriptExhaustedError", "ScriptedModel", "count_tokens", "scripted_tool", "sleep_tool", "tool_call"]


class ScriptExhaustedError(PlanexecError):
    """A scripted double was called more times than it has answers."""


def count_tokens(text: str) -> int:
    """The doubles' deterministic token count: whitespace-separated words (at least 1 for non-empty text)."""
    return len(text.split())


def _request_tokens(request: ModelRequest) -> int:
    return sum(count_tokens(m.content) + 4 for m in request.messages)


def _as_response(item: Any, request: ModelRequest, name: str) -> ModelResponse:
    if isinstance(item, ModelResponse):
        if item.usage.is_zero():
            item = item.model_copy(update={"usage": _usage(request, item.text)})
        named: ModelResponse = item if item.model else item.model_copy(update={"model": name})
        return named
    if isinstance(item, str):
        return ModelResponse(text=item, usage=_usage(request, item), model=name, finish_reason="stop")
    if isinstance(item, ToolCall):
        item = [item]
    if isinstance(item, list) and all(isinstance(t, ToolCall) for t in item):
        text = " ".join(f"{t.name}({t.arguments})" for t in item)
        return ModelResponse(tool_calls=item, usage=_usage(request, text), model=name, finish_reason="tool_calls")
    raise TypeError(f"a scripted answer must be str, ToolCall, list[ToolCall] or ModelResponse, not {type(item).__name__}")


def _usage(request: ModelRequest, text: str) -> Usage:
    return Usage(input_tokens=_request_tokens(request), output_tokens=count_tokens(text), model_calls=1)


class ScriptedModel:
    """A model that answers from a queue and records what it was asked.

    Answers may be text, a `ToolCall` (or a list of them), a `ModelResponse`,
    or an exception instance (raised). Usage is counted with `count_tokens`
    unless a `ModelResponse` brings its own. `delay` seconds are awaited per
    call, to simulate latency; `token_delay` seconds more per output token
    (a word, as `count_tokens` counts), both when completing and when
    streaming, where each token arrives as its own `ModelDelta`.
    """

    def __init__(self, answers: Iterable[Any], *, name: str = "test:scripted", delay: float = 0.0, token_delay: float = 0.0) -> None:
        self.name = name
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []
        self.delay = delay
        self.token_delay = token_delay

    def _next(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self.answers:
            raise ScriptExhaustedError(f"{self.name} has no answer left for call {len(self.requests)}")
        item = self.answers.pop(0)
        if isinstance(item, BaseException):
            raise item
        return _as_response(item, request, self.name)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record the request and return (or raise) the next scripted answer."""
        if self.delay:
            await asyncio.sleep(self.delay)
        response = self._next(request)
        if self.token_delay:
            await asyncio.sleep(self.token_delay * count_tokens(response.text))
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Like `complete`, the text arriving a token at a time (`token_delay` apart), then the response."""
        if self.delay:
            await asyncio.sleep(self.delay)
        response = self._next(request)
        for piece in re.findall(r"\s*\S+|\s+$", response.text):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            yield ModelDelta(text=piece)
        yield response


class FunctionModel:
    """A model played by ``fn(request) -> str | ToolCall | list[ToolCall] | ModelResponse`` (sync or async)."""

    def __init__(self, fn: Callable[[ModelRequest], Any], *, name: str = "test:function") -> None:
        self.name = name
        self.fn = fn
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record the request and answer with the function's reply."""
        self.requests.append(request)
        item = self.fn(request)
        if inspect.isawaitable(item):
            item = await item
        return _as_response(item, request, self.name)


def scripted_tool(name: str, script: Iterable[Any] | None = None, *, worker: str | None = None, default: Any = None) -> Tool:
    """A tool taking free keyword arguments that returns or raises the next item of `script`.

    After the script runs out it returns `default`. Its `.calls` list records
    the arguments of every call. With no script it echoes its arguments.
    """
    items = iter(script) if script is not None else None
    calls: list[dict[str, Any]] = []

    async def run(args: dict[str, Any] | None = None) -> Any:
        calls.append(dict(args or {}))
        if items is None:
            return dict(args or {})
        item = next(items, default)
        if isinstance(item, BaseException):
            raise item
        return item

    run.__name__ = name
    t = Tool(run, name=name, worker=worker, description=f"scripted test tool {name}")
    t.calls = calls  # type: ignore[attr-defined]  # a test double exposes its calls on the tool it returns
    return t


def sleep_tool(name: str = "sleep", *, worker: str | None = None) -> Tool:
    """An async tool ``(seconds: float, value: Any = None)`` that sleeps, then returns `value`."""

    async def sleep(seconds: float, value: Any = None) -> Any:
        await asyncio.sleep(seconds)
        return value

    return Tool(sleep, name=name, worker=worker, description="sleep, then return value")


_ids = itertools.count(1)


def tool_call(name: str, **arguments: Any) -> ToolCall:
    """A `ToolCall` with a fresh id, for scripting models."""
    return ToolCall(call_id=f"call_{next(_ids)}", name=name, arguments=arguments)
