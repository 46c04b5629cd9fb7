"""Tests of the ``anthropic:`` provider, at the HTTP level.

The SDK is given an async client of its own HTTP library with a
``MockTransport``: a handler sees the wire request and answers with the
Messages API's JSON or server-sent events. No network.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

anthropic = pytest.importorskip("anthropic", reason="needs the anthropic SDK (pip install 'planexec[anthropic]')")

from anthropic import _base_client

from planexec.errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelError,
    ModelRateLimitError,
    ModelRequestsBlockedError,
    ModelServerError,
    ModelTimeoutError,
)
from planexec.models import (
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    StreamingModel,
    ToolCall,
    ToolDefinition,
)
from planexec.models.anthropic import AnthropicModel

# The SDK's HTTP client library (httpx2 in SDK 2.x, httpx before): its MockTransport.
_http = getattr(_base_client, "httpx2", None) or _base_client.httpx

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
MOCK_URL = "http://mock.invalid"
NAME = "anthropic:claude-test"


def ask(text: str = "Hi.", **kwargs) -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)], **kwargs)


def mock_model(handler, **kwargs) -> AnthropicModel:
    client = _http.AsyncClient(transport=_http.MockTransport(handler))
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("base_url", MOCK_URL)
    return AnthropicModel("claude-test", http_client=client, **kwargs)


def recording(reply, sent: list):
    """A handler that keeps each request's JSON body and answers with `reply(body)`."""

    def handler(request):
        body = json.loads(request.content)
        sent.append(body)
        return reply(body)

    return handler


def _message(content, *, stop="end_turn", usage=None, stop_details=None) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-served-1",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "stop_details": stop_details,
        "usage": usage or {"input_tokens": 11, "output_tokens": 3},
    }


def _json(body: dict):
    return lambda _: _http.Response(200, json=body)


def _sse(*events: tuple[str, dict]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _stream_events(blocks: list[tuple[dict, list[dict]]], *, stop="end_turn", input_tokens=25, output_tokens=7):
    """A whole SSE body: message_start, each block's start/deltas/stop, message_delta, message_stop."""
    start = _message([], stop=None, usage={"input_tokens": input_tokens, "output_tokens": 1})
    events = [("message_start", {"type": "message_start", "message": start})]
    for index, (block, deltas) in enumerate(blocks):
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        events.append(("ping", {"type": "ping"}))
        for delta in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": output_tokens}}  # fmt: skip
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return _sse(*events)


def _sse_response(body: bytes):
    return _http.Response(200, headers={"content-type": "text/event-stream"}, content=body)


async def _collect(model: AnthropicModel, request: ModelRequest) -> list:
    return [item async for item in model.stream(request)]


# --- complete ------------------------------------------------------------------


def test_text_reply_has_exact_usage_with_cache_tokens_and_the_served_model(allow_requests):
    seen = []

    def handler(request):
        seen.append(request)
        usage = {"input_tokens": 11, "output_tokens": 3, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2}
        return _http.Response(200, json=_message([{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}], usage=usage))

    model = mock_model(handler)
    response = asyncio.run(model.complete(ask(temperature=0.2, seed=3)))
    assert model.name == NAME and model.profile.tool_calling and isinstance(model, StreamingModel)
    assert response == ModelResponse(
        text="Hello", usage={"input_tokens": 18, "output_tokens": 3, "model_calls": 1, "cached_input_tokens": 5, "cache_write_tokens": 2},
        model="claude-served-1", finish_reason="stop",
    )  # fmt: skip
    request = seen[0]
    assert str(request.url) == f"{MOCK_URL}/v1/messages"
    assert "sk-test" in request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    body = json.loads(request.content)
    # no sampling parameters: the API version the SDK speaks rejects them
    assert body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}],
    }


def test_system_tool_calls_and_merged_tool_results_on_the_wire(allow_requests):
    sent: list = []
    reply = _message(
        [{"type": "text", "text": "Searching."},
         {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"q": "llama"}}],
        stop="tool_use",
    )  # fmt: skip
    request = ModelRequest(
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="Find llamas and alpacas."),
            Message(role="system", content="Use tools."),
            Message(role="assistant", content="Two searches.", tool_calls=[
                ToolCall(call_id="toolu_a", name="search", arguments={"q": "llama"}),
                ToolCall(call_id="toolu_b", name="search", arguments={"q": "alpaca"}),
            ]),
            Message(role="tool", call_id="toolu_a", content="3 llamas"),
            Message(role="tool", call_id="toolu_b", content="no alpacas"),
            Message(role="assistant", tool_calls=[ToolCall(call_id="toolu_c", name="count", arguments={})]),
            Message(role="tool", call_id="toolu_c", content="3"),
            Message(role="user", content="And vicuñas?"),
        ],
        tools=[ToolDefinition(name="search", description="Search.", parameters={"type": "object"}),
               ToolDefinition(name="count")],
        max_tokens=100,
    )  # fmt: skip
    response = asyncio.run(mock_model(recording(lambda b: _http.Response(200, json=reply), sent)).complete(request))
    body = sent[0]
    assert body["system"] == "Be brief.\n\nUse tools."
    assert body["max_tokens"] == 100
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Find llamas and alpacas."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Two searches."},
            {"type": "tool_use", "id": "toolu_a", "name": "search", "input": {"q": "llama"}},
            {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {"q": "alpaca"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "3 llamas"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "no alpacas"},
        ]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_c", "name": "count", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_c", "content": "3"},
            {"type": "text", "text": "And vicuñas?"},
        ]},
    ]  # fmt: skip
    assert body["tools"] == [
        {"name": "search", "description": "Search.", "input_schema": {"type": "object"}},
        {"name": "count", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert "tool_choice" not in body
    assert response.text == "Searching." and response.finish_reason == "tool_calls"
    assert response.tool_calls == [ToolCall(call_id="toolu_2", name="search", arguments={"q": "llama"})]


def test_a_tool_message_without_call_id_is_a_bad_request(allow_requests):
    model = mock_model(lambda r: pytest.fail("no request expected"))
    request = ModelRequest(messages=[Message(role="user", content="x"), Message(role="tool", content="y")])
    with pytest.raises(ModelBadRequestError, match="call_id"):
        asyncio.run(model.complete(request))


# --- structured output -----------------------------------------------------------


def _answer(value: dict, *, stop="tool_use") -> dict:
    return _message([{"type": "tool_use", "id": "toolu_1", "name": "final_answer", "input": value}], stop=stop)


def test_structured_output_forces_the_answer_tool_and_returns_its_input_as_json(allow_requests):
    sent: list = []
    model = mock_model(recording(lambda b: _http.Response(200, json=_answer({"answer": 4})), sent))
    tools = [ToolDefinition(name="search")]
    response = asyncio.run(model.complete(ask("2 + 2?", output_schema=ANSWER_SCHEMA, tools=tools)))
    body = sent[0]
    assert body["tool_choice"] == {"type": "tool", "name": "final_answer"}
    assert [t["name"] for t in body["tools"]] == ["search", "final_answer"]
    assert body["tools"][1]["input_schema"] == ANSWER_SCHEMA
    assert json.loads(response.text) == {"answer": 4}
    assert response.tool_calls == [] and response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.model_calls) == (11, 3, 1)


def test_a_non_object_schema_is_wrapped_on_the_wire_and_unwrapped_in_the_reply(allow_requests):
    schema = {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "integer"}}}
    sent: list = []
    model = mock_model(recording(lambda b: _http.Response(200, json=_answer({"value": [1, 2]})), sent))
    response = asyncio.run(model.complete(ask("Two numbers.", output_schema=schema)))
    assert sent[0]["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "required": ["value"],
        "$defs": {"n": {"type": "integer"}},
    }
    assert json.loads(response.text) == [1, 2]


@pytest.mark.parametrize(
    ("reply", "schema", "match"),
    [
        (_answer({"answer": "four"}), ANSWER_SCHEMA, "does not match output_schema: 'four' is not of type 'integer'"),
        (_answer({"value": ["x"]}), {"type": "array", "items": {"type": "integer"}}, "does not match output_schema"),
        (_answer({"values": [1]}), {"type": "array"}, "does not match output_schema: no 'value'"),
        (_message([{"type": "text", "text": "4"}]), ANSWER_SCHEMA, "expected a 'final_answer' tool call"),
        (_answer({"answer": 4}, stop="max_tokens"), ANSWER_SCHEMA, "cut off"),
    ],
    ids=["wrong-type", "wrong-wrapped-item", "no-wrapper", "no-tool-call", "cut-off"],
)
def test_a_reply_that_is_not_a_valid_answer_is_a_bad_request_naming_the_model(allow_requests, reply, schema, match):
    with pytest.raises(ModelBadRequestError, match=match) as info:
        asyncio.run(mock_model(_json(reply)).complete(ask("?", output_schema=schema)))
    assert str(info.value).startswith(NAME) and info.value.model == NAME


def test_an_invalid_output_schema_or_a_clashing_tool_name_fails_before_any_request(allow_requests):
    model = mock_model(lambda r: pytest.fail("no request expected"))
    with pytest.raises(ModelBadRequestError, match="invalid output_schema"):
        asyncio.run(model.complete(ask(output_schema={"type": "no-such-type"})))
    with pytest.raises(ModelBadRequestError, match="'final_answer'"):
        asyncio.run(model.complete(ask(output_schema=ANSWER_SCHEMA, tools=[ToolDefinition(name="final_answer")])))


def test_a_refusal_is_an_error_that_says_so(allow_requests):
    details = {"type": "refusal", "category": "cyber", "explanation": "Could enable malware."}
    reply = _message([{"type": "text", "text": "I can't help."}], stop="refusal", stop_details=details)
    with pytest.raises(ModelBadRequestError, match=r"refused the request .*cyber; Could enable malware\.; I can't help") as info:
        asyncio.run(mock_model(_json(reply)).complete(ask()))
    assert info.value.model == NAME


# --- streaming -------------------------------------------------------------------


def test_streaming_text_yields_deltas_then_one_response_equal_to_complete(allow_requests):
    sent: list = []
    blocks = [({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hel"}, {"type": "text_delta", "text": "lo"}])]
    sse = _stream_events(blocks, input_tokens=25, output_tokens=7)
    whole = _message([{"type": "text", "text": "Hello"}], usage={"input_tokens": 25, "output_tokens": 7})

    def reply(body):
        return _sse_response(sse) if body.get("stream") else _http.Response(200, json=whole)

    model = mock_model(recording(reply, sent))
    items = asyncio.run(_collect(model, ask()))
    assert items[:-1] == [ModelDelta(text="Hel"), ModelDelta(text="lo")]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.text == "Hello" and final.model == "claude-served-1" and final.finish_reason == "stop"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.model_calls) == (25, 7, 1)
    assert sent[0]["stream"] is True
    assert final == asyncio.run(model.complete(ask()))
    assert "stream" not in sent[1]


def test_streaming_tool_calls_come_in_the_final_response_not_as_text(allow_requests):
    blocks = [({"type": "tool_use", "id": "toolu_9", "name": "search", "input": {}},
               [{"type": "input_json_delta", "partial_json": '{"q": '}, {"type": "input_json_delta", "partial_json": '"x"}'}])]  # fmt: skip
    items = asyncio.run(_collect(mock_model(lambda r: _sse_response(_stream_events(blocks, stop="tool_use"))), ask()))
    assert len(items) == 1
    assert items[0].tool_calls == [ToolCall(call_id="toolu_9", name="search", arguments={"q": "x"})]
    assert items[0].finish_reason == "tool_calls"


def test_streaming_structured_output_yields_the_forced_tools_partial_json(allow_requests):
    sent: list = []
    pieces = ['{"ans', 'wer": ', "4}"]
    blocks = [({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Sure."}]),  # not part of the answer
              ({"type": "tool_use", "id": "toolu_1", "name": "final_answer", "input": {}},
               [{"type": "input_json_delta", "partial_json": p} for p in pieces])]  # fmt: skip
    model = mock_model(recording(lambda b: _sse_response(_stream_events(blocks, stop="tool_use")), sent))
    items = asyncio.run(_collect(model, ask("2 + 2?", output_schema=ANSWER_SCHEMA)))
    assert items[:-1] == [ModelDelta(text=p) for p in pieces]
    assert json.loads("".join(d.text for d in items[:-1])) == {"answer": 4}
    final = items[-1]
    assert json.loads(final.text) == {"answer": 4} and final.tool_calls == [] and final.finish_reason == "stop"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (25, 7)
    assert sent[0]["tool_choice"] == {"type": "tool", "name": "final_answer"} and sent[0]["stream"] is True


def test_streamed_structured_output_is_validated_too(allow_requests):
    blocks = [({"type": "tool_use", "id": "toolu_1", "name": "final_answer", "input": {}},
               [{"type": "input_json_delta", "partial_json": '{"answer": "four"}'}])]  # fmt: skip
    model = mock_model(lambda r: _sse_response(_stream_events(blocks, stop="tool_use")))
    with pytest.raises(ModelBadRequestError, match="does not match output_schema"):
        asyncio.run(_collect(model, ask("2 + 2?", output_schema=ANSWER_SCHEMA)))


def test_an_error_event_inside_a_stream_is_mapped(allow_requests):
    start = _message([], stop=None, usage={"input_tokens": 1, "output_tokens": 1})
    body = _sse(
        ("message_start", {"type": "message_start", "message": start}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    with pytest.raises(ModelServerError, match=r"anthropic:claude-test .*overloaded \(overloaded_error\): Overloaded") as info:
        asyncio.run(_collect(mock_model(lambda r: _sse_response(body)), ask()))
    assert info.value.retryable and info.value.status is None


# --- errors ----------------------------------------------------------------------


def _error(status: int, kind: str, message: str, headers=None):
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return lambda request: _http.Response(status, headers=headers or {}, json=body)


@pytest.mark.parametrize(
    ("status", "kind", "error_type"),
    [
        (401, "authentication_error", ModelAuthError),
        (403, "permission_error", ModelAuthError),
        (400, "invalid_request_error", ModelBadRequestError),
        (404, "not_found_error", ModelBadRequestError),
        (422, "invalid_request_error", ModelBadRequestError),
        (408, "timeout_error", ModelTimeoutError),
        (429, "rate_limit_error", ModelRateLimitError),
        (500, "api_error", ModelServerError),
        (529, "overloaded_error", ModelServerError),
    ],
)
def test_http_errors_map_to_model_errors_naming_model_status_and_message(allow_requests, status, kind, error_type):
    with pytest.raises(error_type) as info:
        asyncio.run(mock_model(_error(status, kind, "boom")).complete(ask()))
    assert type(info.value) is error_type
    assert str(info.value).startswith(f"{NAME} at {MOCK_URL}: ")
    assert f"({status}): boom" in str(info.value)
    assert info.value.status == status and info.value.model == NAME
    assert info.value.retryable == (status in (408, 429, 500, 529))


def test_a_rate_limit_keeps_the_wait_the_server_asked_for(allow_requests):
    with pytest.raises(ModelRateLimitError) as info:
        asyncio.run(mock_model(_error(429, "rate_limit_error", "slow down", {"retry-after": "7"})).complete(ask()))
    assert info.value.retry_after == 7.0


def test_the_sdk_retries_only_when_asked(allow_requests):
    def overloaded_once(calls: list):
        def handler(request):
            calls.append(request)
            if len(calls) == 1:
                body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
                return _http.Response(529, headers={"retry-after-ms": "10"}, json=body)
            return _http.Response(200, json=_message([{"type": "text", "text": "fine"}]))

        return handler

    calls: list = []
    with pytest.raises(ModelServerError, match="overloaded"):
        asyncio.run(mock_model(overloaded_once(calls)).complete(ask()))
    assert len(calls) == 1
    calls.clear()
    assert asyncio.run(mock_model(overloaded_once(calls), max_retries=1).complete(ask())).text == "fine"
    assert len(calls) == 2


def test_a_timeout_is_a_timeout_error_naming_the_model(allow_requests):
    def handler(request):
        raise _http.ReadTimeout("slow", request=request)

    with pytest.raises(ModelTimeoutError, match=rf"{NAME} at {MOCK_URL}: timed out after 5s") as info:
        asyncio.run(mock_model(handler, timeout=5).complete(ask()))
    assert info.value.retryable and info.value.model == NAME


def test_a_failed_connection_is_a_server_error(allow_requests):
    def handler(request):
        raise _http.ConnectError("refused", request=request)

    with pytest.raises(ModelServerError, match=rf"{NAME} at {MOCK_URL}: connection failed"):
        asyncio.run(mock_model(handler).complete(ask()))


# --- configuration ---------------------------------------------------------------


def test_a_missing_key_is_an_auth_error_at_call_time(allow_requests, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = AnthropicModel("claude-x")  # constructing needs no key
    with pytest.raises(ModelAuthError, match=r"anthropic:claude-x: no API key .*ANTHROPIC_API_KEY") as info:
        asyncio.run(model.complete(ask()))
    assert info.value.model == "anthropic:claude-x"


def test_key_and_base_url_come_from_the_environment(allow_requests, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://env.invalid/proxy")
    seen = []

    def handler(request):
        seen.append(request)
        return _http.Response(200, json=_message([{"type": "text", "text": "ok"}]))

    model = AnthropicModel(http_client=_http.AsyncClient(transport=_http.MockTransport(handler)))
    assert model.name.startswith("anthropic:claude-") and model.base_url == "http://env.invalid/proxy"
    assert asyncio.run(model.complete(ask())).text == "ok"
    assert str(seen[0].url) == "http://env.invalid/proxy/v1/messages"
    assert "sk-env" in seen[0].headers.get("x-api-key", "") + seen[0].headers.get("authorization", "")


def test_blocked_requests_raise_before_any_network():
    model = mock_model(lambda r: pytest.fail("no request expected"))
    with pytest.raises(ModelRequestsBlockedError) as info:
        asyncio.run(model.complete(ask()))
    assert info.value.model == NAME
    with pytest.raises(ModelRequestsBlockedError):
        asyncio.run(_collect(model, ask()))


def test_a_missing_sdk_gives_an_install_hint(allow_requests, monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic", None)  # makes `import anthropic` fail
    with pytest.raises(ModelError, match=r"pip install 'planexec\[anthropic\]'"):
        asyncio.run(AnthropicModel("claude-x", api_key="sk").complete(ask()))
