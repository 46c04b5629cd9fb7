"""Tests of the ``openai:`` provider.

Integration tests talk to a real OpenAI-compatible server this module starts:
``python -m llama_cpp.server`` on 127.0.0.1 with the bundled SmolLM2 model.
Error mapping and message wiring are tested at the HTTP level with the HTTP
client's ``MockTransport`` handed to the SDK (no network).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import socket
import sys
import time

import jsonschema
import pytest

openai = pytest.importorskip("openai", reason="needs the openai SDK (pip install 'planexec[openai]')")

from planexec.errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelError,
    ModelRateLimitError,
    ModelRequestsBlockedError,
    ModelServerError,
)
from planexec.models import (
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    OpenAIModel,
    StreamingModel,
    ToolCall,
    ToolDefinition,
)
from planexec.models import openai as provider
from planexec.usage import Usage

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
MOCK_URL = "http://mock.invalid/v1"

# The SDK's HTTP client library (httpx, or httpx2 in newer SDKs): its MockTransport.
_http = importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])


def ask(text: str, **kwargs) -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)], **kwargs)


@pytest.fixture
def fresh_modes(monkeypatch):
    monkeypatch.setattr(provider, "_schema_modes", {})
    return provider._schema_modes


@pytest.fixture
def fresh_usage_warnings(monkeypatch):
    monkeypatch.setattr(provider, "_no_stream_usage", set())


def collect(model, request) -> tuple[list[ModelDelta], ModelResponse]:
    """Run one stream to its end: its deltas and its final response (checked to come last, once)."""

    async def run():
        return [item async for item in model.stream(request)]

    *deltas, final = asyncio.run(run())
    assert all(type(d) is ModelDelta for d in deltas) and type(final) is ModelResponse
    return deltas, final


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(llama_server):
    """The suite's real ``llama_cpp.server`` (see conftest)."""
    return llama_server


# --- against the real server ------------------------------------------------


def test_plain_chat_returns_text_exact_usage_and_model_id(server_url, allow_requests):
    model = OpenAIModel("smollm2", base_url=server_url)
    response = asyncio.run(model.complete(ask("What is the capital of France?", temperature=0, max_tokens=24)))
    assert model.name == "openai:smollm2"
    assert response.text.strip()
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.usage.model_calls == 1
    assert response.model == "smollm2"
    assert response.finish_reason in ("stop", "length")


def test_structured_output_validates_and_remembers_the_json_object_schema_fallback(server_url, allow_requests, fresh_modes):
    model = OpenAIModel("smollm2", base_url=server_url)
    request = ask("What is 2 + 2? Answer in JSON.", output_schema=ANSWER_SCHEMA, temperature=0, max_tokens=48)
    first = asyncio.run(model.complete(request))
    jsonschema.validate(json.loads(first.text), ANSWER_SCHEMA)
    assert fresh_modes == {server_url: "json_object_schema"}
    assert model.schema_mode() == "json_object_schema"
    # the remembered mode is used straight away: same answer, one call
    second = asyncio.run(model.complete(request))
    jsonschema.validate(json.loads(second.text), ANSWER_SCHEMA)
    assert second.usage.model_calls == 1


def test_streamed_deltas_make_the_same_text_as_a_plain_call(server_url, allow_requests, fresh_usage_warnings, caplog):
    model = OpenAIModel("smollm2", base_url=server_url)
    assert isinstance(model, StreamingModel) and model.profile.tool_calling and not model.profile.small
    request = ask("What is the capital of France?", temperature=0, seed=5, max_tokens=24)
    whole = asyncio.run(model.complete(request))
    with caplog.at_level(logging.WARNING, logger="planexec.models.openai"):
        deltas, final = collect(model, request)
        collect(model, request)
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == final.text == whole.text
    assert (final.finish_reason, final.model) == (whole.finish_reason, whole.model)
    # llama_cpp.server ignores stream_options: its streams carry no usage, so
    # the call counts 0 tokens (nothing is estimated) and that is logged, once
    assert whole.usage.input_tokens > 0
    assert final.usage == Usage(model_calls=1)
    warnings = [r for r in caplog.records if "sent no usage in a stream" in r.getMessage()]
    assert len(warnings) == 1 and server_url in warnings[0].getMessage()


def test_a_first_structured_stream_negotiates_the_mode_and_is_validated(server_url, allow_requests, fresh_modes):
    model = OpenAIModel("smollm2", base_url=server_url)
    request = ask("What is 2 + 2? Answer in JSON.", output_schema=ANSWER_SCHEMA, temperature=0, max_tokens=48)
    # json_schema is refused with HTTP 500 when the stream is opened, before any chunk
    deltas, final = collect(model, request)
    jsonschema.validate(json.loads(final.text), ANSWER_SCHEMA)
    assert len(deltas) > 1 and "".join(d.text for d in deltas) == final.text
    assert fresh_modes == {server_url: "json_object_schema"}
    assert final.text == asyncio.run(model.complete(request)).text


def test_blocked_requests_raise_before_any_network(server_url):
    model = OpenAIModel("smollm2", base_url=server_url)
    with pytest.raises(ModelRequestsBlockedError) as info:
        asyncio.run(model.complete(ask("Hi.")))
    assert info.value.model == "openai:smollm2"
    with pytest.raises(ModelRequestsBlockedError):
        collect(model, ask("Hi."))


def test_a_closed_port_is_a_quick_server_error(allow_requests):
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=0, timeout=2)
    started = time.perf_counter()
    with pytest.raises(ModelServerError, match="connection") as info:
        asyncio.run(model.complete(ask("Hi.")))
    assert time.perf_counter() - started < 5
    assert info.value.retryable and info.value.model == "openai:m"


# --- HTTP-level, through a mock transport -----------------------------------


def _completion(content: str | None = "ok", *, tool_calls=None, usage=True, finish_reason="stop") -> dict:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "served-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    return body


def mock_model(handler, **kwargs) -> OpenAIModel:
    client = openai.DefaultAsyncHttpxClient(transport=_http.MockTransport(handler))
    kwargs.setdefault("max_retries", 0)
    return OpenAIModel("m", base_url=MOCK_URL, api_key="sk-test", http_client=client, **kwargs)


def _error(status: int, message: str):
    def handler(request):
        return _http.Response(status, json={"error": {"message": message, "type": "x", "param": None, "code": None}})

    return handler


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(401, ModelAuthError), (400, ModelBadRequestError), (429, ModelRateLimitError), (500, ModelServerError)],
)
def test_http_errors_map_to_model_errors_and_keep_the_status(allow_requests, status, error_type):
    with pytest.raises(error_type, match="boom") as info:
        asyncio.run(mock_model(_error(status, "boom")).complete(ask("Hi.")))
    assert info.value.status == status
    assert info.value.model == "openai:m"


def test_server_errors_are_retried_by_the_sdk(allow_requests):
    calls = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            return _http.Response(503, headers={"retry-after-ms": "10"}, json={"error": {"message": "busy"}})
        return _http.Response(200, json=_completion("fine"))

    response = asyncio.run(mock_model(handler, max_retries=2).complete(ask("Hi.")))
    assert response.text == "fine" and len(calls) == 2


def test_messages_and_tools_are_wired_and_tool_calls_decoded(allow_requests):
    sent = {}

    def handler(request):
        sent.update(json.loads(request.content))
        call = {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": '{"q": "llama"}'}}
        return _http.Response(200, json=_completion(None, tool_calls=[call], finish_reason="tool_calls"))

    request = ModelRequest(
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="Find llamas."),
            Message(role="assistant", tool_calls=[ToolCall(call_id="call_1", name="search", arguments={"q": "x"})]),
            Message(role="tool", call_id="call_1", content="nothing"),
        ],
        tools=[ToolDefinition(name="search", description="Search.", parameters={"type": "object"})],
        temperature=0,
        seed=3,
        max_tokens=10,
    )
    response = asyncio.run(mock_model(handler).complete(request))
    assert sent["model"] == "m" and sent["seed"] == 3 and sent["max_tokens"] == 10
    assert sent["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
    }
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "nothing"}
    assert sent["tools"] == [
        {"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {"type": "object"}}}
    ]
    assert response.tool_calls == [ToolCall(call_id="call_2", name="search", arguments={"q": "llama"})]
    assert response.text == "" and response.finish_reason == "tool_calls"
    assert response.model == "served-model"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 3)


def test_malformed_tool_arguments_are_a_bad_request_naming_the_tool(allow_requests):
    def handler(request):
        call = {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": '}}
        return _http.Response(200, json=_completion(None, tool_calls=[call]))

    with pytest.raises(ModelBadRequestError, match="'search'.*malformed"):
        asyncio.run(mock_model(handler).complete(ask("Hi.")))


def test_missing_usage_counts_zero_tokens_and_one_call(allow_requests):
    response = asyncio.run(mock_model(lambda r: _http.Response(200, json=_completion(usage=False))).complete(ask("Hi.")))
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.model_calls) == (0, 0, 1)


def test_plain_json_mode_is_the_last_resort_and_its_reply_is_validated(allow_requests, fresh_modes):
    formats = []
    reply = {"text": '{"answer": 4}'}

    def handler(request):
        response_format = json.loads(request.content)["response_format"]
        formats.append(response_format)
        if response_format != {"type": "json_object"}:
            return _http.Response(400, json={"error": {"message": "unsupported response_format"}})
        return _http.Response(200, json=_completion(reply["text"]))

    model = mock_model(handler)
    response = asyncio.run(model.complete(ask("2 + 2?", output_schema=ANSWER_SCHEMA)))
    assert json.loads(response.text) == {"answer": 4}
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert "schema" in formats[1] and fresh_modes == {MOCK_URL: "json_object"}

    formats.clear()
    reply["text"] = '{"answer": "four"}'
    with pytest.raises(ModelBadRequestError, match="does not match output_schema"):
        asyncio.run(model.complete(ask("2 + 2?", output_schema=ANSWER_SCHEMA)))
    assert formats == [{"type": "json_object"}]  # straight to the remembered mode


def test_a_server_error_unrelated_to_the_format_does_not_fall_back(allow_requests, fresh_modes):
    with pytest.raises(ModelServerError, match="disk full"):
        asyncio.run(mock_model(_error(500, "disk full")).complete(ask("Hi.", output_schema=ANSWER_SCHEMA)))
    assert fresh_modes == {}


def test_invalid_output_schema_is_a_bad_request(allow_requests):
    model = mock_model(lambda r: pytest.fail("no request expected"))
    with pytest.raises(ModelBadRequestError, match="output_schema"):
        asyncio.run(model.complete(ask("Hi.", output_schema={"type": "no-such-type"})))


def test_missing_openai_sdk_gives_an_install_hint(allow_requests, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail
    with pytest.raises(ModelError, match=r"pip install 'openai>=1.40'"):
        asyncio.run(OpenAIModel("m", base_url=MOCK_URL).complete(ask("Hi.")))


def test_no_key_and_no_base_url_is_an_auth_error(allow_requests, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelAuthError, match="OPENAI_API_KEY"):
        asyncio.run(OpenAIModel("gpt-4o-mini").complete(ask("Hi.")))


# --- streaming, HTTP-level ----------------------------------------------------


def _chunk(delta: dict | None = None, *, finish_reason=None, usage=None) -> dict:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "served-model",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def _sse(*events: dict) -> _http.Response:
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return _http.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def _fragment(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> dict:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    fragment = {"index": index, "function": function}
    if call_id is not None:
        fragment |= {"id": call_id, "type": "function"}
    return _chunk({"tool_calls": [fragment]})


def test_a_stream_asks_for_usage_and_reports_the_servers_exact_counts(allow_requests):
    sent = {}

    def handler(request):
        sent.update(json.loads(request.content))
        return _sse(
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hel"}),
            _chunk({"content": "lo"}),
            _chunk({}, finish_reason="stop"),
            _chunk(usage=(17, 2)),  # the usage chunk: no choices
        )

    deltas, final = collect(mock_model(handler), ask("Hi.", temperature=0, seed=1))
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert [d.text for d in deltas] == ["Hel", "lo"]
    assert final == ModelResponse(
        text="Hello", usage=Usage(input_tokens=17, output_tokens=2, model_calls=1), model="served-model", finish_reason="stop"
    )


def test_streamed_tool_call_fragments_are_joined_by_index(allow_requests):
    def handler(request):
        return _sse(
            _chunk({"role": "assistant", "content": None}),
            _fragment(0, "", call_id="call_a", name="search"),
            _fragment(1, '{"x":', call_id="call_b", name="add"),
            _fragment(0, '{"q": "lla'),
            _fragment(1, " 1, "),
            _fragment(0, 'mas"}'),
            _fragment(1, '"y": 2}'),
            _chunk({}, finish_reason="tool_calls"),
            _chunk(usage=(30, 12)),
        )

    deltas, final = collect(mock_model(handler), ask("Hi.", tools=[ToolDefinition(name="search")]))
    assert deltas == []
    assert final.tool_calls == [
        ToolCall(call_id="call_a", name="search", arguments={"q": "llamas"}),
        ToolCall(call_id="call_b", name="add", arguments={"x": 1, "y": 2}),
    ]
    assert final.text == "" and final.finish_reason == "tool_calls"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 12)


def test_malformed_streamed_tool_arguments_are_a_bad_request(allow_requests):
    def handler(request):
        return _sse(_fragment(0, '{"q": ', call_id="c", name="search"), _chunk({}, finish_reason="tool_calls"))

    with pytest.raises(ModelBadRequestError, match="'search'.*malformed"):
        collect(mock_model(handler), ask("Hi."))


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(401, ModelAuthError), (400, ModelBadRequestError), (429, ModelRateLimitError), (500, ModelServerError)],
)
def test_stream_http_errors_map_like_complete(allow_requests, status, error_type):
    with pytest.raises(error_type, match="boom") as info:
        collect(mock_model(_error(status, "boom")), ask("Hi."))
    assert info.value.status == status and info.value.model == "openai:m"


def test_an_error_event_mid_stream_is_a_server_error_after_the_deltas_so_far(allow_requests):
    def handler(request):
        return _sse(_chunk({"content": "par"}), {"error": {"message": "overloaded mid-stream"}})

    async def run():
        seen = []
        with pytest.raises(ModelServerError, match="overloaded mid-stream") as info:
            async for item in mock_model(handler).stream(ask("Hi.")):
                seen.append(item)
        return seen, info.value

    seen, error = asyncio.run(run())
    assert seen == [ModelDelta(text="par")] and error.retryable


def test_a_stream_without_choices_is_a_server_error(allow_requests):
    with pytest.raises(ModelServerError, match="no choices"):
        collect(mock_model(lambda r: _sse(_chunk(usage=(1, 0)))), ask("Hi."))


def test_a_structured_stream_falls_back_to_plain_json_mode_and_is_validated(allow_requests, fresh_modes):
    formats = []
    reply = {"text": '{"answer": 4}'}

    def handler(request):
        body = json.loads(request.content)
        formats.append(body["response_format"])
        if body["response_format"] != {"type": "json_object"}:
            return _http.Response(400, json={"error": {"message": "unsupported response_format"}})
        text = reply["text"]
        return _sse(_chunk({"content": text[:5]}), _chunk({"content": text[5:]}, finish_reason="stop"), _chunk(usage=(9, 6)))

    model = mock_model(handler)
    deltas, final = collect(model, ask("2 + 2?", output_schema=ANSWER_SCHEMA))
    assert json.loads(final.text) == {"answer": 4} and len(deltas) == 2
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert fresh_modes == {MOCK_URL: "json_object"}

    formats.clear()
    reply["text"] = '{"answer": "four"}'
    with pytest.raises(ModelBadRequestError, match="does not match output_schema"):
        collect(model, ask("2 + 2?", output_schema=ANSWER_SCHEMA))
    assert formats == [{"type": "json_object"}]  # straight to the remembered mode
