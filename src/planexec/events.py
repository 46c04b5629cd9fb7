"""Events: frozen, past-tense records of every transition in a run (a public submodule).

Every event carries the run id, a per-run sequence number and a UTC
timestamp, and has a stable JSON form (`event.to_json()`; `parse_event`
reads one back). The classes live in `planexec.engine.events`; this module
is their public name. Imports only `engine.events`.
"""

from planexec.engine.events import *  # noqa: F403 (the public list is engine.events.__all__, pinned by a test)
from planexec.engine.events import __all__ as __all__
