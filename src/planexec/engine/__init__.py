"""The engine: asyncio execution of a validated plan (runs, attempts, revisions, limits, events, results).

Imports `plan`, `workers`, `usage` and `errors`.
"""
