"""Tools and predicates: plain Python functions with a schema taken from their type hints.

Owns `Tool` (a sync or async function whose arguments are checked by a
pydantic model built from its signature before it runs, and whose return
value is checked against its return annotation) and `Predicate` (a named
check on a step's output, registered like a tool). Imports `errors`,
`calls` and `models.base` only.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import PydanticSerializationError

from planexec.errors import RegistryError, ToolInputError, ToolOutputError
from planexec.models.base import ToolDefinition
from planexec.plan.validation import input_problems
from planexec.workers.io import StepCall

__all__ = ["Predicate", "Tool", "in_thread", "predicate", "tool"]

_SCALARS = frozenset({type(None), bool, int, float, str})


async def in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking function in a fresh daemon thread and await its result.

    Unlike `asyncio.to_thread`, a function that never returns cannot keep the
    process alive at exit: a timed-out tool is abandoned, not joined.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def deliver(ok: bool, value: Any) -> None:
        if future.done():  # the awaiting step was cancelled or timed out
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            value = ctx.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the awaiting coroutine, never lost in the thread
            ok, value = False, exc
        else:
            ok = True
        try:
            loop.call_soon_threadsafe(deliver, ok, value)
        except RuntimeError:  # the loop closed while the function ran
            pass

    threading.Thread(target=target, name=f"planexec-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await future


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an annotation that does not resolve is the author's bug: say which
        raise RegistryError(f"cannot read the type hints of {fn.__qualname__}: {exc}", name=fn.__name__) from exc


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc).strip() if doc else ""


class Tool:
    """A function the engine can call with checked arguments.

    The input schema is a pydantic model built from the signature (defaults
    make a parameter optional; extra arguments are refused). A parameter
    annotated `StepCall` receives the call itself (dependency outputs as
    context) and is not part of the schema. Sync functions run in a worker
    thread so a slow one never blocks the event loop.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        worker: str | None = None,
        idempotent: bool = False,
        requires_approval: bool = False,
    ) -> None:
        self.fn = fn
        # a step calling it waits for the approver, as if the step said requires_approval
        self.requires_approval = requires_approval
        self.name = name or fn.__name__
        self.description = description if description is not None else _first_line(fn.__doc__)
        self.worker = worker
        self.idempotent = idempotent
        self.is_async = inspect.iscoroutinefunction(fn)
        hints = _hints(fn)
        fields: dict[str, Any] = {}
        self.call_param: str | None = None
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise RegistryError(f"tool {self.name!r}: *args/**kwargs cannot have a schema", name=self.name)
            annotation = hints.get(pname, Any)
            if annotation is StepCall:
                self.call_param = pname
                continue
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, default)
        model_name = "".join(part.title() for part in self.name.replace("-", "_").split("_")) + "Input"
        self.input_model: type[BaseModel] = create_model(  # type: ignore[call-overload]
            model_name, __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True), **fields
        )
        ret = hints.get("return", Any)
        self.output_type = Any if ret is inspect.Signature.empty else ret
        self.output_adapter: TypeAdapter[Any] = TypeAdapter(self.output_type)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (the decorator keeps it usable)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments."""
        return self.input_model.model_json_schema()

    def output_schema(self) -> dict[str, Any]:
        """The JSON Schema of the return value."""
        return self.output_adapter.json_schema()

    def definition(self) -> ToolDefinition:
        """The tool as a model sees it."""
        return ToolDefinition(name=self.name, description=self.description, parameters=self.input_schema())

    def check_arguments(self, arguments: dict[str, Any], *, step_id: str | None = None) -> BaseModel:
        """Validate arguments; `ToolInputError` lists every problem and the function does not run."""
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as exc:
            problems = input_problems(exc, step_id=step_id)
            detail = "; ".join(p.render() for p in problems)
            raise ToolInputError(f"tool {self.name!r} refused its arguments: {detail}", tool=self.name, problems=problems) from None

    async def invoke(self, arguments: dict[str, Any], call: StepCall | None = None) -> Any:
        """Check the arguments, run the function, check and JSON-encode what it returns."""
        checked = self.check_arguments(arguments, step_id=call.step_id if call else None)
        kwargs = dict(checked.__dict__)  # the validated fields, as pydantic stores them
        if self.call_param is not None:
            kwargs[self.call_param] = call
        if self.is_async:
            result = await self.fn(**kwargs)
        else:
            result = await in_thread(self.fn, **kwargs)
        return self.encode_output(result)

    def encode_output(self, result: Any) -> Any:
        """The return value checked against the declared type, as JSON-able data."""
        kind = type(result)
        if kind in _SCALARS and (self.output_type is Any or self.output_type is kind):
            return result  # already JSON and of the declared type
        try:
            value = self.output_adapter.validate_python(result)
            return self.output_adapter.dump_python(value, mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolOutputError(
                f"tool {self.name!r} returned {type(result).__name__} that its declared type "
                f"{getattr(self.output_type, '__name__', self.output_type)} rejects: {first['msg']}",
                tool=self.name,
            ) from None
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise ToolOutputError(
                f"tool {self.name!r} returned a {type(result).__name__} that cannot be stored as JSON: {exc}",
                tool=self.name,
            ) from None


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    worker: str | None = None,
    idempotent: bool = False,
    requires_approval: bool = False,
) -> Any:
    """Make a `Tool` from a function; usable bare (``@tool``) or with options (``@tool(worker="db")``)."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, worker=worker, idempotent=idempotent, requires_approval=requires_approval)

    return wrap(fn) if fn is not None else wrap


class Predicate:
    """A named check on a step's output: ``fn(output, **args)`` returns a bool, or (bool, reason)."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description if description is not None else _first_line(fn.__doc__)
        self.is_async = inspect.iscoroutinefunction(fn)
        # the arguments after the output, checked when a plan is validated
        hints = _hints(fn)
        params = list(inspect.signature(fn).parameters.values())[1:]
        fields = {
            p.name: (hints.get(p.name, Any), ... if p.default is p.empty else p.default)
            for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        self.args_model: type[BaseModel] = create_model(  # type: ignore[call-overload]
            f"{self.name}Args", __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True), **fields
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Predicate({self.name!r})"

    async def check(self, output: Any, args: dict[str, Any]) -> tuple[bool, str]:
        """Run the predicate; (passed, reason)."""
        if self.is_async:
            result = await self.fn(output, **args)
        else:  # in a thread, so a slow check is bounded by the step's timeout
            result = await in_thread(self.fn, output, **args)
        if isinstance(result, tuple):
            ok, reason = result
            return bool(ok), str(reason)
        return bool(result), "" if result else f"{self.name} returned {result!r}"


def predicate(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Make a `Predicate` from a function; usable bare or with a name."""

    def wrap(f: Callable[..., Any]) -> Predicate:
        return Predicate(f, name=name)

    return wrap(fn) if fn is not None else wrap
