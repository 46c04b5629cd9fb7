"""The exception tree of planexec, and the `Problem` record that errors carry.

Owns the exceptions the package raises on purpose; the few that belong to
one module (named in brackets below) live there. Imports nothing from
planexec. Exceptions carry structured fields (step id, field, rule, value) and
do no I/O; `str(error)` is the readable rendering.

    PlanexecError
    ├── PlanError                     a plan could not be read or is not acceptable
    │   ├── PlanValidationError       one or more `Problem`s, all reported at once
    │   │   └── PlanParseError        malformed JSON or a shape the Plan model rejects
    │   ├── PlanningError             the planner gave up: its last draft and its problems
    │   ├── PlanRejectedError         a review (a policy, a person, no one to ask) did not approve the plan
    │   └── TemplateError             (library.templates) a template cannot be made, filled in, read or imported
    ├── ConfigError                   planexec.toml could not be read or is rejected
    │   └── PolicyError               a policy file or module could not be loaded (names the file, line, rule)
    ├── RegistryError                 a name was registered twice or is unknown
    ├── ToolError                     a tool call went wrong
    │   ├── ToolInputError            arguments refused before the function ran
    │   │   └── CallRefusedError      the plan's contract refused a tool call (`rule` says which rule)
    │   └── ToolOutputError           the function returned what its type rejects
    ├── StepTimeoutError              a step ran past its timeout
    ├── CheckFailedError              a success criterion rejected a step's output
    ├── StoreError                    the run store cannot be opened, read or written (names the file or host)
    │   ├── RunNotFoundError          no stored run has that id
    │   ├── EventConflictError        an event re-appended with a different content
    │   ├── ApprovalError             an approval that is not pending, or asked for twice differently
    │   ├── TemplateNotFoundError     no saved plan template has that name (and version)
    │   ├── LeaseHeldError            another live process holds the run
    │   ├── LeaseLostError            this process no longer holds the run it writes
    │   └── TamperedError             a run's records or a template version changed after they were written
    ├── RunError                      a run ended without succeeding
    │   ├── RunAbortedError           a failure action aborted the run
    │   ├── RunCancelledError         the run was cancelled from outside
    │   └── ReplanRequested           a step asked for a new plan (typed signal)
    ├── ModelError                    a model call failed
    │   ├── ModelAuthError
    │   ├── ModelRateLimitError
    │   ├── ModelTimeoutError
    │   ├── ModelBadRequestError
    │   │   └── ModelOutputError      the reply did not match the requested schema
    │   ├── ModelServerError
    │   └── ModelRequestsBlockedError real model calls are switched off (tests)
    ├── WorkerError                   (workers.worker) a worker could not perform a step
    │   └── IncompleteError           its work is incomplete: out of turns, cut off, or looping
    ├── ResumeError                   (engine.resume) a run cannot be resumed
    ├── JoinerError                   (engine.join) the joiner failed or decided nothing
    ├── SuiteError                    (eval.suite) a suite file that cannot be used
    └── ScriptExhaustedError          (testing) a scripted double ran out of answers

A test (tests/test_errors_tree.py) checks this tree against the classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ApprovalError",
    "CallRefusedError",
    "CheckFailedError",
    "ConfigError",
    "EventConflictError",
    "LeaseHeldError",
    "LeaseLostError",
    "ModelAuthError",
    "ModelBadRequestError",
    "ModelError",
    "ModelOutputError",
    "ModelRateLimitError",
    "ModelRequestsBlockedError",
    "ModelServerError",
    "ModelTimeoutError",
    "PlanError",
    "PlanParseError",
    "PlanRejectedError",
    "PlanValidationError",
    "PlanexecError",
    "PlanningError",
    "PolicyError",
    "Problem",
    "RegistryError",
    "ReplanRequested",
    "RunAbortedError",
    "RunCancelledError",
    "RunError",
    "RunNotFoundError",
    "StepTimeoutError",
    "StoreError",
    "TamperedError",
    "TemplateNotFoundError",
    "ToolError",
    "ToolInputError",
    "ToolOutputError",
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a plan or a call: where it is and which rule it breaks.

    `step_id` is None for plan-level problems; `field` is a dotted path such
    as ``parameters.count`` or ``depends_on``; `rule` is a stable machine name
    (``duplicate_step_id``, ``cycle``, ``unknown_tool`` ...).
    """

    rule: str
    message: str
    step_id: str | None = None
    field: str | None = None

    def render(self) -> str:
        """One readable line: ``step 'b' · parameters.x · missing_parameter: ...``."""
        where = []
        if self.step_id is not None:
            where.append(f"step {self.step_id!r}")
        if self.field:
            where.append(self.field)
        prefix = " · ".join(where)
        return f"{prefix} · {self.rule}: {self.message}" if prefix else f"{self.rule}: {self.message}"

    def to_dict(self) -> dict[str, str | None]:
        """The stable JSON form."""
        return {"rule": self.rule, "message": self.message, "step_id": self.step_id, "field": self.field}


class PlanexecError(Exception):
    """Base of every error planexec raises on purpose."""


class PlanError(PlanexecError):
    """A plan could not be read or is not acceptable."""


class PlanValidationError(PlanError):
    """A plan broke one or more rules; `problems` lists every one of them."""

    def __init__(self, problems: list[Problem], *, plan_id: str | None = None) -> None:
        self.problems = list(problems)
        self.plan_id = plan_id
        super().__init__(self.render())

    def render(self) -> str:
        """All problems, one per line, under a header that counts them."""
        n = len(self.problems)
        head = f"plan {self.plan_id!r} " if self.plan_id else "plan "
        lines = [f"{head}has {n} problem{'s' if n != 1 else ''}:"]
        lines += [f"  - {p.render()}" for p in self.problems]
        return "\n".join(lines)


class PlanParseError(PlanValidationError):
    """The plan text is not JSON, or its shape is rejected by the Plan model."""


class PlanningError(PlanError):
    """The planner could not produce a valid plan within its attempts.

    `model` is the planner's model, `attempts` how many drafts it wrote,
    `problems` the last draft's problems, `last_text` that draft as the model
    wrote it, and `usage` what all attempts cost.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str,
        attempts: int,
        problems: list[Problem],
        last_text: str = "",
        usage: object = None,
    ) -> None:
        self.model = model
        self.attempts = attempts
        self.problems = list(problems)
        self.last_text = last_text
        self.usage = usage
        lines = [message] + [f"  - {p.render()}" for p in self.problems]
        if last_text:
            lines.append(f"last draft ({len(last_text)} chars): {last_text[:600]}")
        super().__init__("\n".join(lines))


class PlanRejectedError(PlanError):
    """The plan's review did not approve it, so nothing ran.

    `by` says who decided (``policy``, ``person``, ``nobody``: a person was
    needed and none could be asked), `reason` why, `plan_id` which plan, and
    `usage` what routing and planning had cost by then.
    """

    def __init__(self, reason: str, *, by: str, plan_id: str | None = None, usage: object = None) -> None:
        self.reason = reason
        self.by = by
        self.plan_id = plan_id
        self.usage = usage
        super().__init__(
            f"plan {plan_id!r} was not approved ({by}): {reason}" if plan_id else f"the plan was not approved ({by}): {reason}"
        )


class ConfigError(PlanexecError):
    """A configuration file could not be read or holds values planexec rejects."""

    def __init__(self, message: str, *, path: Path | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        super().__init__(message)


class PolicyError(ConfigError):
    """A policy rule file or module could not be loaded: `path`, `line` (when known) and `rule` say where."""

    def __init__(self, message: str, *, path: Path | None = None, line: int | None = None, rule: str | None = None) -> None:
        self.rule = rule
        super().__init__(message, path=path, line=line)


class RegistryError(PlanexecError):
    """A tool, worker or predicate name is unknown or registered twice."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        self.name = name
        super().__init__(message)


class ToolError(PlanexecError):
    """A tool call went wrong."""

    def __init__(self, message: str, *, tool: str, problems: list[Problem] | None = None) -> None:
        self.tool = tool
        self.problems = list(problems or [])
        super().__init__(message)


class ToolInputError(ToolError):
    """The arguments did not match the tool's input schema; the function did not run."""


class ToolOutputError(ToolError):
    """The function returned something its declared output type rejects."""


class CallRefusedError(ToolInputError):
    """The plan's contract refused a tool call (`rule`: not granted, outside its grant, untrusted data chose an argument...).

    `chain` is where the deciding data came from, for the person reading the denial. `usage` is what a worker's model
    calls had used when it stopped (a `planexec.usage.Usage`; None for a refusal before any call).
    """

    def __init__(self, message: str, *, tool: str, rule: str, chain: list[str] | None = None, usage: Any = None) -> None:
        self.rule = rule
        self.chain = list(chain or [])
        self.usage = usage
        super().__init__(message, tool=tool)


class StepTimeoutError(PlanexecError):
    """A step ran longer than its timeout."""

    def __init__(self, step_id: str, timeout: float) -> None:
        self.step_id = step_id
        self.timeout = timeout
        super().__init__(f"step {step_id!r} timed out after {timeout:g}s")


class CheckFailedError(PlanexecError):
    """A success criterion rejected a step's output."""

    def __init__(self, step_id: str, criterion: str, reason: str, *, judgement: Any = None) -> None:
        self.step_id = step_id
        self.criterion = criterion
        self.reason = reason
        self.judgement = judgement  # a checks.Judgement: the critics' verdicts and usage so far
        super().__init__(f"step {step_id!r} failed success criterion {criterion}: {reason}")


class StoreError(PlanexecError):
    """The run store could not be opened, read or written; `location` names the file or host."""

    def __init__(self, message: str, *, location: str | None = None) -> None:
        self.location = location
        super().__init__(message)


class RunNotFoundError(StoreError):
    """No stored run has the id `run_id`."""

    def __init__(self, run_id: str, *, location: str | None = None) -> None:
        self.run_id = run_id
        where = f" in {location}" if location else ""
        super().__init__(f"no run {run_id!r}{where}", location=location)


class EventConflictError(StoreError):
    """An event was appended again at `seq` of run `run_id` with a different content (or out of order)."""

    def __init__(self, message: str, *, run_id: str, seq: int, location: str | None = None) -> None:
        self.run_id = run_id
        self.seq = seq
        super().__init__(message, location=location)


class ApprovalError(StoreError):
    """An approval could not be decided: nothing of run `run_id` (and step `step_id`) is pending."""

    def __init__(self, message: str, *, run_id: str, step_id: str | None = None, location: str | None = None) -> None:
        self.run_id = run_id
        self.step_id = step_id
        super().__init__(message, location=location)


class TemplateNotFoundError(StoreError):
    """No saved plan template has the name `name` (and the version `version`, when given)."""

    def __init__(self, name: str, version: int | None = None, *, location: str | None = None) -> None:
        self.name = name
        self.version = version
        what = f"template {name!r}" + (f" version {version}" if version is not None else "")
        super().__init__(f"no {what}" + (f" in {location}" if location else ""), location=location)


class LeaseHeldError(StoreError):
    """Run `run_id` is held by another live process (`holder`, a `store.leases.Lease`): it cannot be run here now."""

    def __init__(self, message: str, *, run_id: str, holder: Any, location: str | None = None) -> None:
        self.run_id = run_id
        self.holder = holder
        super().__init__(message, location=location)


class LeaseLostError(StoreError):
    """This process no longer holds run `run_id` (its lease expired and another process took it): it must stop writing it."""

    def __init__(self, message: str, *, run_id: str, location: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(message, location=location)


class TamperedError(StoreError):
    """What planexec was about to act on changed after it was written: a run's records (`run_id`) or a saved
    template version (`template`, `version`) do not match the audit log. `problems` says what changed, one
    line each; `inspect` is the command that shows every problem. Nothing was done with it.
    """

    def __init__(
        self,
        what: str,
        problems: list[str],
        *,
        inspect: str,
        run_id: str | None = None,
        template: str | None = None,
        version: int | None = None,
        location: str | None = None,
    ) -> None:
        self.what = what
        self.problems = list(problems)
        self.inspect = inspect
        self.run_id = run_id
        self.template = template
        self.version = version
        where = f" in {location}" if location else ""
        first = problems[0] if problems else "it does not match the audit log"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            f"{what}{where} was changed after it was written: {first}{more}. planexec will not use it. "
            f"See every change with: {inspect}; then restore the store from a backup, or start again",
            location=location,
        )


class RunError(PlanexecError):
    """A run ended without succeeding."""

    def __init__(self, message: str, *, run_id: str, step_id: str | None = None) -> None:
        self.run_id = run_id
        self.step_id = step_id
        super().__init__(message)


class RunAbortedError(RunError):
    """A step's failure action aborted the run."""


class RunCancelledError(RunError):
    """The run was cancelled from outside (for example Ctrl-C)."""


class ReplanRequested(RunError):
    """A step failed with `failure_action: replan`; the planner should revise the plan."""

    def __init__(self, message: str, *, run_id: str, step_id: str | None = None, reason: str = "") -> None:
        self.reason = reason
        super().__init__(message, run_id=run_id, step_id=step_id)


class ModelError(PlanexecError):
    """A model call failed. `retryable` says whether trying again may help.

    `retry_after` is the wait in seconds the provider asked for, when it said.
    """

    retryable = False

    def __init__(self, message: str, *, model: str | None = None, status: int | None = None, retry_after: float | None = None) -> None:
        self.model = model
        self.status = status
        self.retry_after = retry_after
        super().__init__(message)


class ModelAuthError(ModelError):
    """The provider refused the credentials."""


class ModelRateLimitError(ModelError):
    """The provider asked us to slow down."""

    retryable = True


class ModelTimeoutError(ModelError):
    """The call took longer than its timeout."""

    retryable = True


class ModelBadRequestError(ModelError):
    """The provider rejected the request itself."""


class ModelOutputError(ModelBadRequestError):
    """The model answered, but not in the requested shape (not JSON, or not matching the schema).

    `text` is what it said and `usage` what the call cost, so a caller that
    repairs (the planner) keeps both.
    """

    def __init__(self, message: str, *, model: str | None = None, text: str = "", usage: object = None) -> None:
        self.text = text
        self.usage = usage
        super().__init__(message, model=model)


class ModelServerError(ModelError):
    """The provider failed on its side."""

    retryable = True


class ModelRequestsBlockedError(ModelError):
    """Real model requests are switched off (the test suite does this by default)."""
