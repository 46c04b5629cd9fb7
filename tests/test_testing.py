"""The shipped test doubles, and the guard that keeps real model calls out of tests."""

from __future__ import annotations

import asyncio
import socket

import pytest

from planexec.errors import ModelRequestsBlockedError
from planexec.models import Message, ModelRequest, ModelResponse, ensure_requests_allowed
from planexec.testing import FunctionModel, ScriptedModel, ScriptExhaustedError, scripted_tool, sleep_tool, tool_call
from planexec.usage import Usage


def req(text):
    return ModelRequest(messages=[Message(role="user", content=text)])


def test_scripted_model_answers_in_order_records_and_counts():
    model = ScriptedModel(
        [
            "hello there",
            tool_call("search", q="x"),
            ModelResponse(text="own", usage=Usage(input_tokens=9, output_tokens=1, model_calls=1)),
            ValueError("down"),
        ]
    )
    r1 = asyncio.run(model.complete(req("say hi please")))
    assert (r1.text, r1.usage.input_tokens, r1.usage.output_tokens, r1.model) == ("hello there", 3 + 4, 2, "test:scripted")
    r2 = asyncio.run(model.complete(req("find")))
    assert r2.tool_calls[0].name == "search" and r2.tool_calls[0].arguments == {"q": "x"} and r2.finish_reason == "tool_calls"
    assert asyncio.run(model.complete(req("x"))).usage.input_tokens == 9
    with pytest.raises(ValueError, match="down"):
        asyncio.run(model.complete(req("x")))
    with pytest.raises(ScriptExhaustedError, match="no answer left for call 5"):
        asyncio.run(model.complete(req("x")))
    assert [r.messages[0].content for r in model.requests] == ["say hi please", "find", "x", "x", "x"]


def test_function_model_plays_the_model():
    async def reply(request):
        return request.messages[-1].content.upper()

    model = FunctionModel(reply)
    assert asyncio.run(model.complete(req("abc"))).text == "ABC"
    assert len(model.requests) == 1


def test_tool_helpers():
    t = scripted_tool("t", [1, RuntimeError("x")], default="done")
    assert asyncio.run(t.invoke({"args": {"k": 1}})) == 1
    with pytest.raises(RuntimeError):
        asyncio.run(t.invoke({}))
    assert asyncio.run(t.invoke({})) == "done"
    assert t.calls == [{"k": 1}, {}, {}]
    assert asyncio.run(sleep_tool().invoke({"seconds": 0.001, "value": 4})) == 4


def test_real_model_requests_are_blocked_in_the_test_suite():
    with pytest.raises(ModelRequestsBlockedError, match="openai:gpt"):
        ensure_requests_allowed("openai:gpt-4o-mini")


def test_network_beyond_loopback_is_refused():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(ConnectionRefusedError, match="only connect to loopback"):
            s.connect(("203.0.113.5", 443))
    finally:
        s.close()
