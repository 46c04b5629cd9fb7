"""Tools and predicates: functions with a schema, from their type hints or from a JSON Schema.

Owns `Tool` (a sync or async function whose arguments are checked before
it runs, by a pydantic model built from its signature or, for
`Tool.from_schema`, by a JSON Schema; it receives them as the caller gave
them, and its return value is checked strictly by `workers.outputs`, then
against its return annotation or output schema, never consumed on the
event loop; with ``isolated=True`` it runs in a child process per call,
`workers.isolated`) and `Predicate` (a named check on a step's output,
registered like a tool). Imports `errors`, `models.base`,
`plan.validation` and `workers` (`io`, `context`, `arguments`, `outputs`,
`isolated`).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import threading
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict, Unpack, overload

import jsonschema
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError

from planexec.errors import RegistryError, ToolInputError, ToolOutputError
from planexec.models.base import ToolDefinition
from planexec.plan.validation import input_problems
from planexec.workers.arguments import SchemaInput
from planexec.workers.context import is_context_annotation, tool_context
from planexec.workers.io import StepCall
from planexec.workers.isolated import FunctionRef, IsolatedCall, reference
from planexec.workers.outputs import encode, encode_inline

__all__ = ["DESTINATION_NAMES", "FREE_TEXT_NAMES", "Predicate", "Tool", "ToolOptions", "effect_arguments", "in_thread", "predicate", "tool"]

FREE_TEXT_NAMES = frozenset({"body", "message", "content", "text", "subject", "title", "description", "comment", "note", "summary"})
"""Argument names that carry data rather than choose where it lands: a side-effecting tool's free text unless it says otherwise."""

DESTINATION_NAMES = frozenset(
    {
        "url", "uri", "href", "link", "endpoint", "webhook", "host", "hostname", "domain", "server", "ip", "address", "addr",
        "email", "to", "cc", "bcc", "recipient", "recipients", "destination", "dest", "target", "channel", "path", "file",
        "filename", "account", "iban", "phone", "number",
    }
)  # fmt: skip
"""Argument names that name a destination: sensitive for every tool that reaches the network."""

_DESTINATION_SUFFIXES = ("_url", "_uri", "_host", "_address", "_email", "_path", "_account", "_recipient")
_DESTINATION_FORMATS = frozenset(
    {"uri", "url", "iri", "uri-reference", "iri-reference", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6"}
)


def effect_arguments(
    arguments: Iterable[str],
    properties: Mapping[str, Any],
    *,
    declared: frozenset[str],
    free_text: frozenset[str],
    read_only: bool,
    network: bool,
) -> tuple[frozenset[str], frozenset[str]]:
    """(sensitive, chooses) for a tool's arguments.

    `sensitive`, the arguments untrusted data may never choose: those
    `declared`, and every one that names a destination (by its name, or its
    schema's ``format``) of a tool that reaches the `network` or changes
    things. `chooses`, the arguments a pre-approval must bound before it
    lifts quarantine: of a side-effecting tool every one but its
    `free_text`, of a read-only one its sensitive ones.
    """
    names = list(arguments)
    sensitive = set(declared)
    if network or not read_only:
        for a in names:
            spec = properties.get(a)
            fmt = spec.get("format") if isinstance(spec, Mapping) else None
            lowered = a.lower()
            if lowered in DESTINATION_NAMES or lowered.endswith(_DESTINATION_SUFFIXES) or fmt in _DESTINATION_FORMATS:
                sensitive.add(a)
    chooses = set(sensitive) if read_only else {a for a in names if a not in free_text} | sensitive
    return frozenset(sensitive), frozenset(chooses)


class ToolOptions(TypedDict, total=False):
    """What a tool may declare besides its function: `Tool`'s keyword arguments, in one place.

    `tool(...)` and `Registry.tool(...)` take exactly these (a test checks
    they are `Tool`'s); their meaning is on `Tool`.
    """

    name: str | None
    description: str | None
    worker: str | None
    idempotent: bool
    requires_approval: bool
    read_only: bool
    sensitive: Iterable[str]
    untrusted_output: bool
    network: bool
    free_text: Iterable[str] | None
    input_schema: Mapping[str, Any] | None
    output_schema: Mapping[str, Any] | None
    isolated: bool
    resources: Mapping[str, Any] | None


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
        name = getattr(fn, "__name__", repr(fn))
        raise RegistryError(f"cannot read the type hints of {getattr(fn, '__qualname__', name)}: {exc}", name=name) from exc


def _handler_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """A schema tool's handler need not be a plain function (a partial, a callable object): no hints, nothing injected."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return {}


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc).strip() if doc else ""


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature: nothing to inject
        return []


def _validator(name: str, schema: dict[str, Any]) -> Any:
    """A jsonschema validator for a tool's output schema; `RegistryError` when the schema is not one."""
    check = jsonschema.validators.validator_for(schema)
    try:
        check.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise RegistryError(f"tool {name!r}: output_schema is not a valid JSON Schema: {exc.message}", name=name) from None
    return check(schema)


class Tool:
    """A function the engine can call with checked arguments.

    Built from a function (`Tool(fn)`, `@tool`), the input schema is a
    pydantic model built from the signature (defaults make a parameter
    optional; extra arguments are refused); built with `from_schema`, it is
    the given JSON Schema, checked with jsonschema (`arguments.SchemaInput`).
    Either way `input_model` offers ``model_validate``, ``model_json_schema``
    and ``model_fields``, which is all the planner and the validator read.

    The function receives the arguments as the caller gave them, validated,
    and the defaults of those left out; nothing else (see `keywords`).
    Two kinds of parameter are injected, not part of the schema: one
    annotated `StepCall` receives the call itself (dependency outputs as
    context), one annotated `ToolContext` (or ``ToolContext[MyDeps]``) the
    run's dependencies, run id and step id (`workers.context`). Sync
    functions run in a worker thread so a slow one never blocks the event loop.
    ``isolated=True`` runs each call in a child process instead
    (`workers.isolated`): one that hangs, blocks in C or ignores its
    cancellation is stopped for sure (SIGTERM, then SIGKILL after the
    cancel grace), and one that dies fails only its step. Its function
    must be a ``def`` at the top level of a module, and it takes no
    injected parameter. `resources` (``num_cpus``, ``num_gpus``, ``memory``
    in bytes, custom ``resources``) is what one step of it takes where a
    distributed runner runs it (`planexec.scale`).

    `idempotent`, `requires_approval`, `read_only`, `sensitive` and
    `untrusted_output` are declarations the engine and policies read: a step
    calling a tool that `requires_approval` waits for the approver;
    `read_only` says the tool changes nothing (any other tool is
    side-effecting, approved per call inside a role worker); `sensitive`
    names the arguments that choose where an effect lands (a path, a
    recipient, a URL, an amount, code), which untrusted data may not choose;
    `untrusted_output` (the default) says its result may carry text from
    outside (a file, a page, a message), which quarantines whoever reads it:
    a tool whose result is its own computation (a calculator) declares
    ``untrusted_output=False``.

    Egress is a side effect, so `sensitive` (the attribute) is more than the
    names declared: `network` says the tool reaches the network (a page
    fetch, an API), and then every argument that names a destination (`url`,
    `host`, `to`, `recipient`, `account`, `path`, a ``format: uri`` or
    ``email`` property ...) is sensitive, read-only or not; so it is for a
    side-effecting tool (not `read_only`). `chooses` is what a pre-approved
    grant must bound before it lifts quarantine: of a side-effecting tool,
    every argument except its `free_text` ones, which carry data rather than
    choose where it lands (default: arguments named like ``body``,
    ``message``, ``content``, ``text``, ``subject``). `declared_sensitive`
    keeps the names as given.
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
        read_only: bool = False,
        sensitive: Iterable[str] = (),
        untrusted_output: bool = True,
        network: bool = False,
        free_text: Iterable[str] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        isolated: bool = False,
        resources: Mapping[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description if description is not None else _first_line(fn.__doc__)
        self.worker = worker
        self.idempotent = idempotent
        # a step calling it waits for the approver, as if the step said requires_approval
        self.requires_approval = requires_approval
        self.read_only = read_only
        # arguments that choose where an effect lands (a path, a recipient, a URL, an amount, code):
        # a value for one that comes from untrusted data is denied unless the step's grant bounds it
        self.declared_sensitive: frozenset[str] = frozenset(sensitive)
        self.sensitive: frozenset[str] = self.declared_sensitive  # widened below, once the arguments are known
        # it reaches the network: a read can be a send, so the arguments that name a destination are sensitive
        self.network = network
        # its output may carry text from outside (a file, a page, a message): whoever reads it is quarantined
        self.untrusted_output = untrusted_output
        self.is_async = inspect.iscoroutinefunction(fn)
        by_schema = input_schema is not None
        hints = _hints(fn) if not by_schema else _handler_hints(fn)
        self.call_param: str | None = None
        self.context_param: str | None = None
        params = self._schema_parameters(hints, varargs=by_schema)
        # the function's own default objects, passed for arguments left out (pydantic would pass a copy)
        self.defaults: dict[str, Any] = {}
        self._fields: dict[type, tuple[str, ...]] = {}  # an argument model's field names, by model (see `keywords`)
        self.input_model: type[BaseModel] | SchemaInput = (
            SchemaInput(input_schema, name=self.name) if input_schema is not None else self._signature_model(params, hints)
        )
        properties = self.input_model.schema.get("properties", {}) if isinstance(self.input_model, SchemaInput) else {}
        arguments = list(properties) if isinstance(self.input_model, SchemaInput) else [p.name for p in params]
        # arguments that carry data rather than choose where it lands; never one declared sensitive
        self.free_text: frozenset[str] = (
            frozenset(free_text) if free_text is not None else frozenset(a for a in arguments if a.lower() in FREE_TEXT_NAMES)
        ) - self.declared_sensitive
        # what a pre-approval must bound before it lifts quarantine (of a side effect: every argument but free text)
        self.sensitive, self.chooses = effect_arguments(
            arguments, properties, declared=self.declared_sensitive, free_text=self.free_text, read_only=read_only, network=network
        )
        self._output_schema = dict(output_schema) if output_schema is not None else None
        self._output_validator = _validator(self.name, self._output_schema) if self._output_schema is not None else None
        ret = hints.get("return", Any) if not by_schema else Any
        self.output_type = Any if ret is inspect.Signature.empty else ret
        self.output_adapter: TypeAdapter[Any] = TypeAdapter(self.output_type)
        # nothing declared about the output: the strict check is the only one
        self._untyped = self._output_validator is None and self.output_type is Any
        # where a child process finds the function, for a tool that runs in one per call (see `workers.isolated`)
        self.isolated: FunctionRef | None = self._isolation(by_schema) if isolated else None
        # what a step takes where a distributed runner runs it (`planexec.scale`); the local runner ignores it
        self.resources: dict[str, Any] = _resources(self.name, resources)

    def _isolation(self, by_schema: bool) -> FunctionRef:
        """Where a child finds the function; `RegistryError` naming the tool when none could, or it takes what cannot cross."""
        if by_schema:
            raise RegistryError(f"tool {self.name!r}: a tool built from a JSON Schema cannot be isolated", name=self.name)
        injected = self.context_param or self.call_param
        if injected is not None:
            raise RegistryError(
                f"tool {self.name!r} is isolated, so its parameter {injected!r} cannot be injected: a ToolContext's dependencies "
                "and a StepCall do not cross to another process (pass what the tool needs as arguments)",
                name=self.name,
            )
        return reference(self.fn, self.name)

    def _schema_parameters(self, hints: dict[str, Any], *, varargs: bool) -> list[inspect.Parameter]:
        """The parameters that take arguments; those annotated `StepCall` or `ToolContext` are noted as injected."""
        params = []
        for param in _parameters(self.fn):
            annotation = hints.get(param.name, Any)
            if annotation is StepCall:
                self.call_param = param.name
            elif is_context_annotation(annotation):
                self.context_param = param.name
            elif param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                if not varargs:  # a schema tool's handler may well be ``handler(**arguments)``
                    raise RegistryError(f"tool {self.name!r}: *args/**kwargs cannot have a schema", name=self.name)
            else:
                params.append(param)
        return params

    def _signature_model(self, params: list[inspect.Parameter], hints: dict[str, Any]) -> type[BaseModel]:
        fields: dict[str, Any] = {}
        for param in params:
            default = ... if param.default is param.empty else param.default
            if param.default is not param.empty and not isinstance(param.default, FieldInfo):
                self.defaults[param.name] = param.default
            fields[param.name] = (hints.get(param.name, Any), default)
        model_name = "".join(part.title() for part in self.name.replace("-", "_").split("_")) + "Input"
        return create_model(model_name, __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True), **fields)

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        handler: Callable[..., Any],
        *,
        output_schema: Mapping[str, Any] | None = None,
        worker: str | None = None,
        idempotent: bool = False,
        requires_approval: bool = False,
        read_only: bool = False,
        sensitive: Iterable[str] = (),
        untrusted_output: bool = True,
        network: bool = False,
        free_text: Iterable[str] | None = None,
    ) -> Tool:
        """A tool declared by a name, a description and a JSON Schema of its arguments (an MCP tool, another framework's).

        `handler` (sync or async) is called with the arguments as keywords,
        exactly as given once the schema accepts them (no coercion), plus the
        ``default`` of each top-level property left out; a parameter of the
        handler annotated `ToolContext` or `StepCall` is injected as for a
        function tool. A schema without ``additionalProperties`` refuses
        unknown arguments. With `output_schema` the result must match it
        (`ToolOutputError` otherwise).
        """
        return cls(
            handler,
            name=name,
            description=description,
            worker=worker,
            idempotent=idempotent,
            requires_approval=requires_approval,
            read_only=read_only,
            sensitive=sensitive,
            untrusted_output=untrusted_output,
            network=network,
            free_text=free_text,
            input_schema=input_schema,
            output_schema=output_schema,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (the decorator keeps it usable)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def required_arguments(self) -> frozenset[str]:
        """The arguments a call must give (the others have the tool's own default)."""
        fields = self.input_model.model_fields
        return frozenset(name for name, f in fields.items() if f.is_required())

    def approval_gaps(self, bounded: Iterable[str]) -> list[str]:
        """For a side-effecting tool, the arguments a call must give that choose where its effect lands and are not
        among `bounded`: what a pre-approval leaves to whoever writes the call (empty for a read-only tool)."""
        if self.read_only:
            return []
        return sorted((self.chooses & self.required_arguments) - set(bounded))

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments."""
        return self.input_model.model_json_schema()

    def output_schema(self) -> dict[str, Any]:
        """The JSON Schema of the return value."""
        if self._output_schema is not None:
            return dict(self._output_schema)
        return self.output_adapter.json_schema()

    def definition(self) -> ToolDefinition:
        """The tool as a model sees it."""
        return ToolDefinition(name=self.name, description=self.description, parameters=self.input_schema())

    def check_arguments(self, arguments: dict[str, Any], *, step_id: str | None = None) -> Any:
        """Validate arguments (a pydantic model instance, or a schema tool's arguments dict); `ToolInputError` lists every problem."""
        model = self.input_model
        try:
            if isinstance(model, type):  # a pydantic model: its validator itself, without `model_validate`'s options
                return model.__pydantic_validator__.validate_python(arguments)
            return model.model_validate(arguments)
        except ValidationError as exc:
            problems = input_problems(exc, step_id=step_id)
            detail = "; ".join(p.render() for p in problems)
            raise ToolInputError(f"tool {self.name!r} refused its arguments: {detail}", tool=self.name, problems=problems) from None

    def keywords(self, checked: Any) -> dict[str, Any]:
        """The keyword arguments the function receives for checked arguments: as given, plus defaults for those left out.

        For a function tool an argument the caller gave is its validated
        value (``"5"`` becomes 5 for an ``int`` parameter; a dict given to a
        pydantic-model parameter becomes that model, as annotated), and one
        left out is the function's own default object. Arguments the caller
        did not give never appear with any other value. A schema tool's
        handler receives the arguments unchanged (see `SchemaInput`).
        """
        if not isinstance(checked, BaseModel):
            return dict(checked)
        given = checked.model_fields_set
        out = {}
        fields = self._fields.get(type(checked))
        if fields is None:  # the class's field names, read once: pydantic's `model_fields` is slow to reach
            fields = self._fields[type(checked)] = tuple(type(checked).model_fields)
        for key in fields:
            if key in given:
                out[key] = getattr(checked, key)
            elif key in self.defaults:
                out[key] = self.defaults[key]
            else:  # a default declared as ``= Field(default=...)``: pydantic has read it
                out[key] = getattr(checked, key)
        return out

    async def invoke(self, arguments: dict[str, Any], call: StepCall | None = None) -> Any:
        """Check the arguments, run the function, check what it returns (see `checked_output`)."""
        step_id = call.step_id if call else None
        checked = self.check_arguments(arguments, step_id=step_id)
        kwargs = self.keywords(checked)
        if self.call_param is not None:
            kwargs[self.call_param] = call
        if self.context_param is not None:
            kwargs[self.context_param] = tool_context(self.name, call)
        if self.isolated is not None:
            return await self._invoke_isolated(self.isolated, arguments, step_id)
        if self.is_async:
            result = await self.fn(**kwargs)
        else:
            result = await in_thread(self.fn, **kwargs)
            if inspect.isawaitable(result):  # a callable object or a partial that returns a coroutine
                result = await result
        if self._plain(result):  # the usual case, without a coroutine for `checked_output`
            return result
        return await self.checked_output(result, step_id=step_id)

    async def _invoke_isolated(self, ref: FunctionRef, arguments: dict[str, Any], step_id: str | None) -> Any:
        """Run the call in a child process (`workers.isolated`); a step that stops waiting stops the child, and waits until it is gone."""
        call = IsolatedCall(ref, arguments, tool=self.name, tool_class=Tool, step_id=step_id)
        try:
            return await in_thread(call.run)
        finally:
            if not call.gone.is_set():  # cancelled (the step's timeout, a cancel): SIGTERM, SIGKILL after the grace
                await in_thread(call.stop)

    def call_here(self, arguments: dict[str, Any], *, step_id: str | None = None, max_bytes: int | None = None) -> Any:
        """Check the arguments, run the function here and now (blocking), return its output as JSON data of at most `max_bytes`.

        What an isolated tool's child process does with each call.
        """
        checked = self.check_arguments(arguments, step_id=step_id)
        result = self.fn(**self.keywords(checked))
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        data = encode(result, step_id=step_id, tool=self.name, max_bytes=max_bytes)
        return data if self._untyped else self.encode_output(result, step_id=step_id)

    async def checked_output(self, result: Any, *, step_id: str | None = None) -> Any:
        """What the function returned as JSON data, strictly checked (`workers.outputs`) and never consumed on the event loop.

        NaN, a set, a generator or an object that is not data fails here,
        naming the place (``output[1] is nan``); a declared type or output
        schema then judges the value. A small value is checked on the event
        loop, a large one in a thread that stops when the step stops waiting
        (its timeout, a cancel). A string or a number is returned as it is.
        The size is the engine's to bound (`max_output_bytes`), as for any
        worker's output: a tool does not know the engine's limit.
        """
        if self._plain(result):
            return result  # already JSON and of the declared type
        done, data = encode_inline(result, step_id=step_id, tool=self.name, max_bytes=None)  # refusals raise at once
        if done:
            return data if self._untyped else self.encode_output(result, step_id=step_id)
        stop = threading.Event()
        try:
            return await in_thread(self.encode_output, result, step_id=step_id, stop=stop)
        finally:
            stop.set()  # the step gave up waiting: the walk stops at its next look

    def _plain(self, result: Any) -> bool:
        """True when `result` is JSON already (None, a bool, a string, a finite number) of the declared type, with no schema to meet."""
        kind = type(result)
        declared = self.output_type is Any or self.output_type is kind
        return self._output_validator is None and kind in _SCALARS and declared and (kind is not float or math.isfinite(result))

    def encode_output(self, result: Any, *, step_id: str | None = None, stop: threading.Event | None = None) -> Any:
        """The return value checked strictly, then against the declared type (or output schema), as JSON data.

        Blocking, and as long as the value is large: `checked_output` runs it
        in a thread for a large value. `stop` ends the strict walk early.
        `ToolOutputError` names the step (when given), the tool and what is wrong.
        """
        data = encode(result, step_id=step_id, tool=self.name, max_bytes=None, stop=stop)
        who = f"step {step_id!r} (tool {self.name!r})" if step_id is not None else f"tool {self.name!r}"
        if self._output_validator is not None:
            error = jsonschema.exceptions.best_match(self._output_validator.iter_errors(data))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path)
                raise ToolOutputError(
                    f"{who}: returned a value its output schema rejects{f' at {where}' if where else ''}: {error.message}",
                    tool=self.name,
                )
            return data
        if self._untyped:
            return data
        try:
            # the value itself, not its JSON form: the declared type judges what the function returned
            value = self.output_adapter.validate_python(result)
            return self.output_adapter.dump_python(value, mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolOutputError(
                f"{who}: returned {type(result).__name__} that its declared type "
                f"{getattr(self.output_type, '__name__', self.output_type)} rejects: {first['msg']}",
                tool=self.name,
            ) from None
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise ToolOutputError(
                f"{who}: returned a {type(result).__name__} that cannot be stored as JSON: {exc}", tool=self.name
            ) from None


_RESOURCE_KEYS = frozenset({"num_cpus", "num_gpus", "memory", "resources"})


def _resources(name: str, resources: Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool's declared resources; `RegistryError` naming the tool for a key no runner reads."""
    declared = dict(resources or {})
    unknown = sorted(set(declared) - _RESOURCE_KEYS)
    if unknown:
        raise RegistryError(
            f"tool {name!r}: resources takes {', '.join(sorted(_RESOURCE_KEYS))}; not {', '.join(map(repr, unknown))}", name=name
        )
    return declared


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


@overload
def tool(fn: Callable[..., Any], **options: Unpack[ToolOptions]) -> Tool: ...


@overload
def tool(fn: None = None, **options: Unpack[ToolOptions]) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Callable[..., Any] | None = None, **options: Unpack[ToolOptions]) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` from a function; usable bare (``@tool``) or with options (``@tool(worker="db")``): any of `ToolOptions`.

    ``isolated=True`` runs each call in a child process (`workers.isolated`):
    the function must be a ``def`` at the top level of a module.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, **options)

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
        self.args_model: type[BaseModel] = create_model(  # type: ignore[call-overload]  # fields built at run time from the signature
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
