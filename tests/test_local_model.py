"""Integration tests of the ``local:`` provider with the real embedded SmolLM2 model (no network)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import jsonschema
import pytest

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (pip install 'planexec[local]')")

from planexec.errors import ModelBadRequestError, ModelError
from planexec.models import (
    LocalModel,
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    StreamingModel,
    ToolDefinition,
)
from planexec.models.local import default_model_path

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def ask(text: str, **kwargs) -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)], **kwargs)


@pytest.fixture(scope="module")
def model() -> LocalModel:
    try:
        default_model_path()
    except ModelError as e:
        pytest.skip(str(e))
    return LocalModel()


def test_plain_chat_answer_has_text_exact_usage_and_name(model):
    started = time.perf_counter()
    response = asyncio.run(model.complete(ask("What is the capital of France?", temperature=0, max_tokens=32)))
    elapsed = time.perf_counter() - started
    assert response.text.strip()
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.usage.model_calls == 1
    assert response.model == "local:smollm2"
    assert response.finish_reason in ("stop", "length")
    print(f"{response.usage.output_tokens} tokens in {elapsed:.2f}s (model load included)")


def test_output_schema_constrains_the_answer_to_valid_json(model):
    request = ask("What is 2 + 2? Answer in JSON.", output_schema=ANSWER_SCHEMA, temperature=0, max_tokens=48)
    response = asyncio.run(model.complete(request))
    data = json.loads(response.text)
    jsonschema.validate(data, ANSWER_SCHEMA)


def test_same_seed_and_temperature_zero_give_the_same_text(model):
    request = ask("Name three colours.", temperature=0, seed=7, max_tokens=32)
    first = asyncio.run(model.complete(request))
    second = asyncio.run(model.complete(request))
    assert first.text == second.text
    assert first.usage == second.usage


def test_concurrent_calls_are_serialised_and_both_complete(model):
    async def both():
        ticks = 0

        async def ticker():
            # the event loop keeps running while the model generates in a thread
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        try:
            return await asyncio.gather(
                model.complete(ask("Say hello.", temperature=0, max_tokens=24)),
                model.complete(ask("Say goodbye.", temperature=0, max_tokens=24)),
            ), ticks
        finally:
            tick_task.cancel()

    (first, second), ticks = asyncio.run(both())
    assert first.text.strip() and second.text.strip()
    assert first.usage.output_tokens > 0 and second.usage.output_tokens > 0
    assert ticks > 0


def test_tools_are_ignored_and_never_faked(model):
    request = ask("Hi.", tools=[ToolDefinition(name="search")], temperature=0, max_tokens=16)
    response = asyncio.run(model.complete(request))
    assert response.tool_calls == []


def test_invalid_output_schema_is_a_bad_request(model):
    request = ask("Hi.", output_schema={"type": "no-such-type"}, max_tokens=8)
    with pytest.raises(ModelBadRequestError, match="output_schema"):
        asyncio.run(model.complete(request))


PATTERNS = [r"^([01]\d|2[0-3]):[0-5]\d$", r"^[+-]\d\d:\d\d$", r"^[\d.]+$", r"^\D+$", r"^\w+@\w+$", r"^[^\s]+$"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_class_escapes_in_a_pattern_are_spelled_out_for_the_grammar_and_match_the_same(pattern):
    import re

    import llama_cpp

    from planexec.models.local import decodable_schema

    schema = {"type": "object", "properties": {"t": {"type": "string", "pattern": pattern}, "pattern": {"type": "string"}}}
    spelled = decodable_schema(schema)["properties"]["t"]["pattern"]
    assert "\\d" not in spelled and "\\w" not in spelled and "\\s" not in spelled and "\\D" not in spelled
    # llama.cpp's parser rejects the escapes the converter copies through (and a grammar it cannot read is a crash)
    assert not re.search(r'"\\[dDwWsS]', llama_cpp.llama_grammar.json_schema_to_gbnf(json.dumps(decodable_schema(schema))))
    for text in ["09:30", "24:00", "-06:00", "1.5", "abc", "a1", "a_b@c", "x y", "]", "7", ""]:
        assert bool(re.fullmatch(pattern, text, re.ASCII)) == bool(re.fullmatch(spelled, text)), (pattern, text)


def test_a_schema_whose_pattern_says_digit_decodes_instead_of_killing_the_process():
    # before: the grammar llama.cpp could not parse built a sampler from nothing and the process died with SIGSEGV
    code = (
        "import asyncio, json, re\n"
        "from planexec.models import LocalModel, Message, ModelRequest\n"
        "schema = {'type': 'object', 'properties': {'t': {'type': 'string', 'pattern': '^[0-5]\\\\d$'}}, 'required': ['t']}\n"
        "request = ModelRequest(messages=[Message(role='user', content='A number')], output_schema=schema, max_tokens=24)\n"
        "text = asyncio.run(LocalModel().complete(request)).text\n"
        "assert re.fullmatch('[0-5][0-9]', json.loads(text)['t']), text\n"
        "print('decoded', text)\n"
    )
    try:
        default_model_path()
    except ModelError as e:
        pytest.skip(str(e))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "decoded" in proc.stdout


def test_missing_gguf_path_is_a_clear_model_error(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelError, match="nope.gguf") as info:
        asyncio.run(LocalModel(str(missing)).complete(ask("Hi.")))
    assert str(missing) in str(info.value)
    assert info.value.model == "local:smollm2"


def test_missing_llama_cpp_gives_an_install_hint(monkeypatch, tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(ModelError, match="CMAKE_ARGS=.*GGML_NATIVE=OFF.*llama-cpp-python==0.3.36"):
        asyncio.run(LocalModel(gguf).complete(ask("Hi.")))


# --- streaming ----------------------------------------------------------------


async def _collect(model, request) -> tuple[list[ModelDelta], ModelResponse]:
    items = [item async for item in model.stream(request)]
    *deltas, final = items
    assert all(type(d) is ModelDelta for d in deltas) and type(final) is ModelResponse
    return deltas, final


def test_local_model_streams_and_has_no_native_tools(model):
    assert isinstance(model, StreamingModel)
    assert not model.profile.tool_calling and model.profile.small and model.profile.grammar


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "finish_reason"),
    # one reply stops at the end-of-generation token (not counted), one is cut by max_tokens
    [("Say hello.", 64, "stop"), ("Write a long story about a dragon.", 24, "length")],
)
def test_streamed_deltas_make_the_text_and_usage_equals_complete(model, prompt, max_tokens, finish_reason):
    request = ask(prompt, temperature=0, seed=3, max_tokens=max_tokens)
    deltas, final = asyncio.run(_collect(model, request))
    whole = asyncio.run(model.complete(request))
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == final.text
    assert final.finish_reason == finish_reason
    assert final == whole  # text, exact usage, finish reason and model name
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    if finish_reason == "length":
        assert final.usage.output_tokens == max_tokens


def test_streamed_structured_output_is_schema_valid_and_equals_complete(model):
    request = ask("What is 2 + 2? Answer in JSON.", output_schema=ANSWER_SCHEMA, temperature=0, max_tokens=48)
    deltas, final = asyncio.run(_collect(model, request))
    jsonschema.validate(json.loads(final.text), ANSWER_SCHEMA)
    assert len(deltas) > 1 and "".join(d.text for d in deltas) == final.text
    assert final == asyncio.run(model.complete(request))


def test_closing_a_stream_early_stops_the_generation_and_frees_the_model(model):
    request = ask("Write a long story about a dragon.", temperature=0, max_tokens=400)

    async def first_delta_then_close():
        stream = model.stream(request)
        first = await anext(stream)
        started = time.perf_counter()
        await stream.aclose()
        return first, time.perf_counter() - started

    first, closing = asyncio.run(first_delta_then_close())
    assert isinstance(first, ModelDelta) and first.text
    # aclose returned once the worker thread left the model: nothing holds it now
    assert model._run_lock.acquire(blocking=False)
    model._run_lock.release()
    assert model._llama.completion_tokens < 50  # stopped at the next token, not after 400
    assert closing < 5
    after = asyncio.run(model.complete(ask("Say hello.", temperature=0, max_tokens=8)))
    assert after.text.strip()


def test_a_stream_and_a_complete_in_one_loop_are_serialised(model):
    streamed = ask("Say hello.", temperature=0, seed=3, max_tokens=16)
    completed = ask("Say goodbye.", temperature=0, max_tokens=16)
    alone = asyncio.run(_collect(model, streamed))[1], asyncio.run(model.complete(completed))

    async def both():
        return await asyncio.gather(_collect(model, streamed), model.complete(completed))

    (deltas, final), other = asyncio.run(both())
    # had the two shared the model at once, their tokens would have interfered
    assert (final, other) == alone
    assert "".join(d.text for d in deltas) == final.text


def test_stream_errors_are_model_errors(model):
    with pytest.raises(ModelBadRequestError, match="output_schema"):
        asyncio.run(_collect(model, ask("Hi.", output_schema={"type": "no-such-type"})))
    with pytest.raises(ModelBadRequestError, match="n_ctx=2048"):
        asyncio.run(_collect(model, ask("word " * 3000, max_tokens=8)))
    # the model is free again after a failed stream
    assert asyncio.run(model.complete(ask("Say hello.", temperature=0, max_tokens=8))).text.strip()
