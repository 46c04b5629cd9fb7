"""Where the run store is: choosing it (CLI, environment, config, default) and opening the right backend.

Owns `store_target` (``--store``, then ``PLANEXEC_STORE``, then ``store`` in
``planexec.toml``, then ``.planexec/runs.db`` in the project), and
`open_store`, which reads a target: ``postgresql://...`` (or
``postgres://``) opens `PostgresRunStore`, ``sqlite:///relative/path`` or
``sqlite:////absolute/path`` or a plain path opens `SqliteRunStore`;
another scheme is a `StoreError`. Imports the store's backends and
`errors`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from planexec.errors import StoreError
from planexec.store.base import RunStore
from planexec.store.postgres import PostgresRunStore
from planexec.store.sqlite import SqliteRunStore

__all__ = ["DEFAULT_STORE", "STORE_ENV", "open_store", "sqlite_path", "store_target"]

DEFAULT_STORE = Path(".planexec") / "runs.db"  # in the project: the folder the command runs in
STORE_ENV = "PLANEXEC_STORE"


def store_target(cli: str | None = None, config: str | None = None, *, environ: Mapping[str, str] | None = None) -> str:
    """The store to use: `cli` (``--store``), else ``$PLANEXEC_STORE``, else `config` (``store`` in planexec.toml), else the default."""
    env = os.environ if environ is None else environ
    for choice in (cli, env.get(STORE_ENV), config):
        if choice:
            return choice
    return str(DEFAULT_STORE)


def open_store(target: str | os.PathLike[str] | None = None, *, create: bool = True) -> RunStore:
    """Open the store `target` names (see the module docstring); None: `store_target()`.

    With `create` False a store that does not exist yet is a `StoreError`
    (a command that only reads must not leave an empty database behind).
    """
    spec = os.fspath(target) if target is not None else store_target()
    path = sqlite_path(spec)
    if path is not None:
        return SqliteRunStore(path, create=create)
    if spec.partition("://")[0].lower() in ("postgresql", "postgres"):
        return PostgresRunStore(spec, create=create)
    raise StoreError(f"unknown run store {spec!r}: use a file path, sqlite:///path or postgresql://host/database")


def sqlite_path(spec: str) -> Path | None:
    """The file a target names when it is a SQLite store (a path or ``sqlite:///...``); None for other URLs."""
    if "://" not in spec:
        return Path(spec).expanduser()
    scheme, _, rest = spec.partition("://")
    if scheme.lower() != "sqlite":
        return None
    if not rest.startswith("/") or rest == "/":
        raise StoreError(f"a SQLite store URL is sqlite:///relative/path or sqlite:////absolute/path, not {spec!r}")
    return Path(rest[1:]).expanduser()
