"""Workers: the `Worker` protocol, tools from typed functions, the registry, roles and the toolkit.

Imports `plan`, `models`, `usage` and `errors`; never the engine, planning or store.
"""
