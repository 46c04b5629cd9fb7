"""Four local tools for the travel example: a deadline, nearby airports, a flight search that can be down, a pick.

They read a small dataset shipped with the example (``flights.json``; set
TRAVEL_FLIGHTS to use another file), so the example runs anywhere, without a
network. The search of an airport listed in TRAVEL_DOWN_AIRPORTS (default
``BOS``) fails, as a real search does when its provider is down: the plan's
``replan`` failure action then asks the planner for a new version, which
keeps the finished steps and searches the nearby airports instead. Set
``TRAVEL_DOWN_AIRPORTS=`` (empty) to let the first search succeed. Every
call is logged to ``$TRAVEL_STATE_DIR/calls.jsonl`` (default
``.travel-demo``), so you can see which steps ran and how often.

    planexec run --plan examples/travel/plan.json --tools examples/travel/tools.py --yes
"""

from __future__ import annotations

import json
import os
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from planexec import tool

DATASET = Path(__file__).with_name("flights.json")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
Weekday = Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
Code = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="an IATA airport code, e.g. BOS")]
LocalTime = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="a local time, HH:MM")]
Offset = Annotated[str, Field(pattern=r"^[+-]\d\d:\d\d$", description="an offset from UTC, e.g. -06:00")]


class FlightSearchError(RuntimeError):
    """The flight search of an airport is unavailable."""


class Deadline(BaseModel):
    """When the traveller must have landed: a day and a local time with its UTC offset."""

    date: date
    arrive_by: datetime


class Airport(BaseModel):
    code: str
    name: str
    miles: int


class Flight(BaseModel):
    flight_id: str
    airline: str
    origin: str
    destination: str
    departs: datetime
    arrives: datetime
    price: float


class SearchResult(BaseModel):
    origin: str
    destination: str
    date: date
    flights: list[Flight]


class Choice(BaseModel):
    """The flight picked, and a sentence naming it."""

    flight_id: str
    airline: str
    origin: str
    departs: datetime
    arrives: datetime
    price: float
    considered: int
    summary: str


def _state() -> Path:
    return Path(os.environ.get("TRAVEL_STATE_DIR", ".travel-demo"))


def _log(tool_name: str, **fields: Any) -> None:
    state = _state()
    state.mkdir(parents=True, exist_ok=True)
    with open(state / "calls.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool_name, **fields}, default=str) + "\n")


def _dataset() -> dict[str, Any]:
    """The flights file, or a ValueError naming it and what is wrong."""
    path = Path(os.environ.get("TRAVEL_FLIGHTS") or DATASET)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"the flights file {str(path)!r} does not exist (TRAVEL_FLIGHTS names it)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the flights file {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("airports"), dict) or not isinstance(data.get("flights"), list):
        raise ValueError(f"the flights file {str(path)!r} needs an 'airports' object and a 'flights' list")
    return data


@tool(worker="trip-planner", read_only=True, untrusted_output=False)
def arrival_deadline(
    weekday: Weekday,
    week_of: date,
    before: LocalTime,
    utc_offset: Offset = "-06:00",
) -> Deadline:
    """The date of `weekday` in the week starting `week_of`, and the local time the flight must land before."""
    _log("arrival_deadline", weekday=weekday, week_of=week_of)
    day = week_of + timedelta(days=(WEEKDAYS.index(weekday) - week_of.weekday()) % 7)
    return Deadline(date=day, arrive_by=datetime.fromisoformat(f"{day.isoformat()}T{before}:00{utc_offset}"))


@tool(worker="trip-planner", read_only=True, untrusted_output=False)
def nearby_airports(airport: Code, max_miles: Annotated[int, Field(gt=0, le=500)] = 100) -> list[Airport]:
    """Airports within `max_miles` of an airport (its IATA code), nearest first."""
    _log("nearby_airports", airport=airport, max_miles=max_miles)
    airports = _dataset()["airports"]
    if airport not in airports:
        raise ValueError(f"unknown airport {airport!r}; the dataset knows {', '.join(sorted(airports))}")
    near = sorted(airports[airport].get("nearby", []), key=lambda a: a["miles"])
    return [Airport(code=a["code"], name=airports[a["code"]]["name"], miles=a["miles"]) for a in near if a["miles"] <= max_miles]


@tool(worker="flight-search", read_only=True)
def search_flights(origin: Code, destination: Code, day: date) -> SearchResult:
    """Flights from `origin` to `destination` departing on `day` (the fares come from outside: untrusted text)."""
    _log("search_flights", origin=origin, destination=destination, day=day)
    down = {code.strip() for code in os.environ.get("TRAVEL_DOWN_AIRPORTS", "BOS").split(",") if code.strip()}
    if origin in down:
        raise FlightSearchError(f"the flight search for {origin} is down (HTTP 503 from the fares provider)")
    flights = [
        Flight.model_validate(f)
        for f in _dataset()["flights"]
        if f["origin"] == origin and f["destination"] == destination and f["departs"][:10] == day.isoformat()
    ]
    return SearchResult(origin=origin, destination=destination, date=day, flights=flights)


@tool(worker="trip-planner", read_only=True, untrusted_output=False)
def cheapest_arriving_before(searches: list[SearchResult], arrive_by: datetime) -> Choice:
    """The cheapest flight of these searches that lands before `arrive_by` on its day; an error when none does."""
    _log("cheapest_arriving_before", searches=[s.origin for s in searches], arrive_by=arrive_by)
    found = [f for s in searches for f in s.flights]
    fits = [f for f in found if f.arrives < arrive_by and f.arrives.date() == arrive_by.date()]
    if not fits:
        raise ValueError(f"none of the {len(found)} flights found lands before {arrive_by.isoformat()}")
    best = min(fits, key=lambda f: (f.price, f.arrives))
    summary = (
        f"{best.airline} {best.flight_id} from {best.origin}, departing {best.departs:%a %H:%M} and landing "
        f"{best.arrives:%H:%M} local, ${best.price:g}: the cheapest of {len(fits)} flights that land before "
        f"{arrive_by:%H:%M} ({len(found)} found)"
    )
    return Choice(
        flight_id=best.flight_id,
        airline=best.airline,
        origin=best.origin,
        departs=best.departs,
        arrives=best.arrives,
        price=best.price,
        considered=len(found),
        summary=summary,
    )
