"""One exchange with a remote A2A agent: a message sent, the agent's task followed to its end, its answer read back.

Owns `exchange` (send one message, follow the task the agent makes of it
to a terminal state, return a `Reply`: the answer, the usage the agent
reported, the task id), `reply_of` (a finished `Task` or a direct
`Message` as JSON data) and `usage_of` (the usage an agent reports in its
task's metadata, ``{"usage": {"input_tokens": ..., "cost": ...}}``, as
planexec's own server does; nothing when it reports none).

The task is followed over the agent's stream when its card offers one,
else by asking for it until it ends; a task in ``input-required`` (the
agent waits for someone: a planexec agent for a person's approval) is
waited for the same way. Whatever stops the exchange early (its `timeout`,
the step's timeout, a cancelled run) cancels the remote task, where the
protocol allows, before it returns.

Failures are `ToolError`s that name the agent: it cannot be reached, it
refused the request (a wrong token, an error it answered), its task
failed, was rejected or cancelled (with the message it gave), or it did
not answer within `timeout`. Needs the ``a2a`` extra (a2a-sdk),
imported when an exchange starts, with an install hint. Imports `config`,
`errors` and `usage`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec.config import A2aAgentConfig
from planexec.errors import ToolError
from planexec.usage import Usage

__all__ = ["INSTALL", "Reply", "exchange", "reply_of", "usage_of"]

INSTALL = "remote A2A agents need the a2a extra: pip install 'planexec[a2a]'"
POLL = 0.5  # seconds between two reads of a task the agent does not stream
_CANCEL_WAIT = 5.0  # seconds a cancel of the remote task may take before the step gives up on it
_ERROR_TEXT = 2000  # characters of an agent's own message kept in the step's error
_TERMINAL = ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED")


@dataclass(frozen=True, slots=True)
class Reply:
    """What an agent answered: its `output` (JSON data), the `usage` it reported, its task's id (None for a direct message)."""

    output: Any
    usage: Usage
    task_id: str | None = None


async def exchange(
    name: str,
    config: A2aAgentConfig,
    text: str,
    *,
    data: Mapping[str, Any] | None = None,
    token: str | None = None,
    tool: str | None = None,
) -> Reply:
    """Send `text` (and `data`, a structured part) to the agent `name` and wait for its answer (see the module docstring)."""
    try:
        import httpx
        from a2a.client import ClientConfig, ClientFactory
    except ImportError:
        raise ToolError(f"A2A agent {name!r}: {INSTALL}", tool=tool or name) from None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, read=None)) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
        follow = _Follow(name, config, tool or name)
        try:
            client = await factory.create_from_url(config.url)
        except Exception as exc:
            raise follow.failed("its agent card could not be read", exc) from None
        follow.client = client
        try:
            if config.timeout is None:
                return await follow.run(text, data)
            return await asyncio.wait_for(follow.run(text, data), config.timeout)
        except TimeoutError:
            await follow.cancel_remote()
            raise ToolError(
                f"A2A agent {name!r} ({config.url}) gave no answer within {config.timeout:g}s{follow.cancelled_note()}", tool=follow.tool
            ) from None
        except asyncio.CancelledError:  # the step's timeout, a cancelled run: the remote task goes too
            await follow.cancel_remote()
            raise


class _Follow:
    """One exchange in progress: its client, the task the agent made, and how it ended."""

    def __init__(self, name: str, config: A2aAgentConfig, tool: str) -> None:
        self.name = name
        self.config = config
        self.tool = tool
        self.client: Any = None
        self.task_id: str | None = None
        self.cancelled: bool | None = None  # None: nothing to cancel; True: the remote task was cancelled; False: it could not be

    def failed(self, what: str, exc: BaseException) -> ToolError:
        """A `ToolError` naming the agent, what failed and why (the SDK's message, cut)."""
        text = str(exc).strip() or type(exc).__name__
        if len(text) > _ERROR_TEXT:
            text = text[:_ERROR_TEXT] + "…"
        return ToolError(f"A2A agent {self.name!r} ({self.config.url}): {what}: {text}", tool=self.tool)

    async def run(self, text: str, data: Mapping[str, Any] | None) -> Reply:
        """Send the message; follow its task to the end; the reply."""
        from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest
        from google.protobuf import struct_pb2
        from google.protobuf.json_format import ParseDict

        parts = [Part(text=text)]
        if data:
            parts.append(Part(data=ParseDict(dict(data), struct_pb2.Value())))
        message = Message(role=Role.ROLE_USER, parts=parts, message_id=uuid.uuid4().hex)
        last: Any = None
        try:
            async for event in self.client.send_message(SendMessageRequest(message=message)):
                if event.HasField("message"):
                    return Reply(output=reply_of(event.message), usage=Usage())
                if event.HasField("task"):
                    last = event.task
                    self.task_id = event.task.id
                elif event.HasField("status_update"):
                    self.task_id = event.status_update.task_id
                if last is not None and _state(last) in _TERMINAL:
                    break
                if event.HasField("status_update") and _name(event.status_update.status.state) in _TERMINAL:
                    break
            while True:
                if self.task_id is None:
                    raise ToolError(
                        f"A2A agent {self.name!r} ({self.config.url}) answered with neither a task nor a message", tool=self.tool
                    )
                last = await self.client.get_task(GetTaskRequest(id=self.task_id))
                if _state(last) in _TERMINAL:
                    break
                await asyncio.sleep(POLL)  # a task that waits (input-required) or a stream that ended early
        except (ToolError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise self.failed("the request failed", exc) from None
        return self.finished(last)

    def finished(self, task: Any) -> Reply:
        """The reply of a task in a terminal state; `ToolError` with the agent's own words when it did not complete."""
        state = _state(task)
        if state != "TASK_STATE_COMPLETED":
            said = _text(task.status.message) if task.status.HasField("message") else ""
            ended = state.removeprefix("TASK_STATE_").lower()
            raise ToolError(
                f"A2A agent {self.name!r} ({self.config.url}): its task {task.id} ended {ended}"
                + (f": {said[:_ERROR_TEXT]}" if said else ""),
                tool=self.tool,
            )
        return Reply(output=reply_of(task), usage=usage_of(task), task_id=task.id)

    async def cancel_remote(self) -> None:
        """Cancel the agent's task, if it made one, within a few seconds; note whether it took."""
        if self.task_id is None or self.client is None:
            return
        from a2a.types import CancelTaskRequest

        try:
            await asyncio.wait_for(asyncio.shield(self.client.cancel_task(CancelTaskRequest(id=self.task_id))), _CANCEL_WAIT)
            self.cancelled = True
        except BaseException:  # a task already ended, an agent that cannot cancel, one gone: the step ends either way
            self.cancelled = False

    def cancelled_note(self) -> str:
        """How the remote task ended, for the step's error."""
        if self.cancelled is True:
            return f"; its task {self.task_id} was cancelled"
        if self.cancelled is False:
            return f"; its task {self.task_id} could not be cancelled"
        return ""


def reply_of(found: Any) -> Any:
    """A finished task's answer (its artifacts' parts) or a message's parts, as JSON data: one text is a string."""
    parts = [p for artifact in found.artifacts for p in artifact.parts] if hasattr(found, "artifacts") else list(found.parts)
    if not parts and hasattr(found, "status") and found.status.HasField("message"):
        parts = list(found.status.message.parts)
    values = [_part(p) for p in parts]
    if len(values) == 1:
        return values[0]
    return values


def usage_of(task: Any) -> Usage:
    """The usage an agent reported in its task's metadata (``usage``: planexec's `Usage` fields); zero when none."""
    from google.protobuf.json_format import MessageToDict

    metadata = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    reported = metadata.get("usage")
    if not isinstance(reported, Mapping):
        return Usage()
    known = {k: v for k, v in reported.items() if k in Usage.model_fields and isinstance(v, (int, float))}
    ints = {k: int(v) if k != "cost" else float(v) for k, v in known.items()}
    try:
        return Usage(**ints)
    except ValueError:  # an agent's numbers that are not a usage (negative counts): not ours to record
        return Usage()


def _part(part: Any) -> Any:
    from google.protobuf.json_format import MessageToDict

    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    if kind == "data":
        return _whole(MessageToDict(part.data))
    if kind == "url":
        return {"url": part.url, "media_type": part.media_type}
    if kind == "raw":
        return {"raw_bytes": len(part.raw), "media_type": part.media_type}
    return json.loads(json.dumps(MessageToDict(part)))


def _whole(value: Any) -> Any:
    """`value` with its whole floats as ints again (protobuf's `Value` keeps every number as a double)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def _text(message: Any) -> str:
    return " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()


def _state(task: Any) -> str:
    return _name(task.status.state)


def _name(state: Any) -> str:
    from a2a.types import TaskState

    return str(TaskState.Name(state))
