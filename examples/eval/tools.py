"""Lookup tools over a small fictional atlas, for the evaluation suites in this folder.

Eight cities, four countries, four rivers and eight mayors; every tool is a
deterministic lookup that sleeps a fixed latency per (tool, key) between 50
and 300 ms, like a slow API: 50 + sha256("tool:key") mod 251 ms. The
environment variable ``PLANEXEC_EVAL_LATENCY`` scales it (``0`` switches the
sleeps off, e.g. in tests; ``1`` is the default). An unknown key raises a
`ToolError` listing the known ones. Loaded by the suites with
``tools: tools.py`` (`Registry.load_module`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from planexec.errors import ToolError
from planexec.workers.tools import tool

CITIES: dict[str, dict[str, Any]] = {
    "Avalon": {"population": 84200, "area": 120, "founded": 1204, "elevation": 310, "mayor": "Ilse Marrow", "river": "Ashflow", "twin": "Corvale"},
    "Brightwater": {"population": 100300, "area": 236, "founded": 1387, "elevation": 45, "mayor": "Tobias Quill", "river": "Silverrun", "twin": "Falkreach"},
    "Corvale": {"population": 56750, "area": 95, "founded": 1122, "elevation": 620, "mayor": "Mara Ostrander", "river": "Redwater", "twin": "Avalon"},
    "Dunmere": {"population": 23400, "area": 45, "founded": 1650, "elevation": 185, "mayor": "Edwin Hale", "river": "Silverrun", "twin": "Hollowmere"},
    "Eastmarch": {"population": 142800, "area": 310, "founded": 1298, "elevation": 12, "mayor": "Petra Voss", "river": "Greyling", "twin": "Greyhaven"},
    "Falkreach": {"population": 38150, "area": 88, "founded": 1533, "elevation": 870, "mayor": "Jonas Brandt", "river": "Redwater", "twin": "Brightwater"},
    "Greyhaven": {"population": 71900, "area": 150, "founded": 1411, "elevation": 240, "mayor": "Lucia Fenn", "river": "Greyling", "twin": "Eastmarch"},
    "Hollowmere": {"population": 12600, "area": 30, "founded": 1702, "elevation": 505, "mayor": "Oskar Lind", "river": "Ashflow", "twin": "Dunmere"},
}  # fmt: skip
COUNTRIES = {"Norvania": "Brightwater", "Sudmark": "Corvale", "Westeria": "Eastmarch", "Ostland": "Greyhaven"}
PEOPLE: dict[str, dict[str, Any]] = {
    "Ilse Marrow": {"born_in": "Dunmere", "born": 1971},
    "Tobias Quill": {"born_in": "Hollowmere", "born": 1965},
    "Mara Ostrander": {"born_in": "Falkreach", "born": 1980},
    "Edwin Hale": {"born_in": "Greyhaven", "born": 1958},
    "Petra Voss": {"born_in": "Avalon", "born": 1975},
    "Jonas Brandt": {"born_in": "Corvale", "born": 1969},
    "Lucia Fenn": {"born_in": "Eastmarch", "born": 1983},
    "Oskar Lind": {"born_in": "Brightwater", "born": 1990},
}
RIVERS: dict[str, dict[str, Any]] = {
    "Ashflow": {"length": 412, "mouth": "Eastmarch"},
    "Silverrun": {"length": 268, "mouth": "Greyhaven"},
    "Redwater": {"length": 534, "mouth": "Avalon"},
    "Greyling": {"length": 197, "mouth": "Dunmere"},
}


def latency_ms(name: str, key: str) -> int:
    """The fixed latency of one lookup, in milliseconds: 50 to 300, the same on every run."""
    return 50 + int(hashlib.sha256(f"{name}:{key}".encode()).hexdigest(), 16) % 251


async def _lookup(name: str, table: dict[str, Any], key: str, kind: str) -> Any:
    scale = float(os.environ.get("PLANEXEC_EVAL_LATENCY", "1") or 0)
    if scale > 0:
        await asyncio.sleep(latency_ms(name, key) / 1000 * scale)
    if key not in table:
        raise ToolError(f"{name}: no {kind} named {key!r}; known: {', '.join(sorted(table))}", tool=name)
    return table[key]


@tool(idempotent=True, read_only=True)
async def population(city: str) -> int:
    """The number of people living in a city."""
    return (await _lookup("population", CITIES, city, "city"))["population"]


@tool(idempotent=True, read_only=True)
async def area(city: str) -> int:
    """The area of a city in square kilometres."""
    return (await _lookup("area", CITIES, city, "city"))["area"]


@tool(idempotent=True, read_only=True)
async def founded(city: str) -> int:
    """The year a city was founded."""
    return (await _lookup("founded", CITIES, city, "city"))["founded"]


@tool(idempotent=True, read_only=True)
async def elevation(city: str) -> int:
    """The elevation of a city above sea level, in metres."""
    return (await _lookup("elevation", CITIES, city, "city"))["elevation"]


@tool(idempotent=True, read_only=True)
async def mayor(city: str) -> str:
    """The name of a city's mayor."""
    return (await _lookup("mayor", CITIES, city, "city"))["mayor"]


@tool(idempotent=True, read_only=True)
async def twin_city(city: str) -> str:
    """The twin city of a city."""
    return (await _lookup("twin_city", CITIES, city, "city"))["twin"]


@tool(idempotent=True, read_only=True)
async def river(city: str) -> str:
    """The river that flows through a city."""
    return (await _lookup("river", CITIES, city, "city"))["river"]


@tool(idempotent=True, read_only=True)
async def capital(country: str) -> str:
    """The capital city of a country."""
    return await _lookup("capital", COUNTRIES, country, "country")


@tool(idempotent=True, read_only=True)
async def birthplace(person: str) -> str:
    """The city a person was born in."""
    return (await _lookup("birthplace", PEOPLE, person, "person"))["born_in"]


@tool(idempotent=True, read_only=True)
async def birth_year(person: str) -> int:
    """The year a person was born."""
    return (await _lookup("birth_year", PEOPLE, person, "person"))["born"]


@tool(idempotent=True, read_only=True)
async def river_length(river: str) -> int:
    """The length of a river in kilometres."""
    return (await _lookup("river_length", RIVERS, river, "river"))["length"]


@tool(idempotent=True, read_only=True)
async def river_mouth(river: str) -> str:
    """The city where a river ends."""
    return (await _lookup("river_mouth", RIVERS, river, "river"))["mouth"]
