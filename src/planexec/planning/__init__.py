"""Planning: a goal becomes a plan (draft schema, repair, streaming), the router, the replanner and the joiner.

Imports `plan`, `workers`, `models` and the engine's records and protocols.
"""
