"""How the run store writes values that SQL has no common type for: timestamps as sortable UTC text.

Owns `timestamp` and `from_timestamp`, shared by every table of both
backends, so that text order is time order everywhere. Imports nothing
from planexec.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["from_timestamp", "now", "timestamp"]


def timestamp(at: datetime) -> str:
    """A datetime as the store writes it: UTC, microseconds, ``Z`` (text that sorts in time order)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_timestamp(text: str | None) -> datetime | None:
    """The datetime `timestamp` wrote (None stays None)."""
    return None if text is None else datetime.fromisoformat(text)


def now() -> str:
    """The current time as `timestamp` writes it."""
    return timestamp(datetime.now(UTC))
