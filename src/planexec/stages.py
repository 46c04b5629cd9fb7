"""The stages of a goal's path, public: what `Team.iter` yields and a face shows (see `planexec.team.stages`).

A face (the CLI, the web console, the MCP server, or one of your own)
follows a goal through these records: `Routed`, `Planned`,
`WaitingForPerson`, `Reviewed`, `Started` or `Queued`, `EventSeen`,
`Finished`; a single agent that the contract stopped yields `HandedOff`,
then the stages of the plan that finishes its goal. Each says its `kind` and has a JSON form (`to_dict`).
`ROUTINGS` are the ways ``auto`` mode may decide (`PlanningOptions.routing`);
`Route` is what it decided.
"""

from planexec.planning.router import ROUTINGS, Route
from planexec.team.stages import EventSeen, Finished, HandedOff, Planned, Queued, Reviewed, Routed, Stage, Started, WaitingForPerson

__all__ = [
    "ROUTINGS",
    "EventSeen",
    "Finished",
    "HandedOff",
    "Planned",
    "Queued",
    "Reviewed",
    "Route",
    "Routed",
    "Stage",
    "Started",
    "WaitingForPerson",
]
