"""Where the run store is: choosing it (CLI, environment, config, default) and opening the right backend.

Owns `store_target` (``--store``, then ``PLANEXEC_STORE``, then ``store`` in
``planexec.toml``, then ``.planexec/runs.db`` in the project), and
`open_store`, which reads a target: a plain path opens `SqliteRunStore`;
a URL opens the backend registered for its scheme. Backends register by
scheme through the entry point group ``planexec.stores`` (a function
``(target, create=...) -> RunStore``), the built-ins the same way:
``sqlite:///relative/path`` or ``sqlite:////absolute/path`` (`open_sqlite`),
``postgresql://...`` or ``postgres://`` (`open_postgres`). An unknown
scheme is a `StoreError` naming the installed ones; a backend that fails
to load is a `StoreError` naming it, not a traceback. Imports the store's
backends and `errors`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from planexec.errors import StoreError
from planexec.store.base import RunStore
from planexec.store.postgres import PostgresRunStore
from planexec.store.sqlite import SqliteRunStore

__all__ = ["DEFAULT_STORE", "ENTRY_POINT_GROUP", "STORE_ENV", "open_postgres", "open_sqlite", "open_store", "sqlite_path", "store_target"]

DEFAULT_STORE = Path(".planexec") / "runs.db"  # in the project: the folder the command runs in
STORE_ENV = "PLANEXEC_STORE"
ENTRY_POINT_GROUP = "planexec.stores"
StoreBackend = Callable[..., RunStore]  # (target, *, create) -> the store


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
    if "://" not in spec:
        return open_sqlite(spec, create=create)
    scheme = spec.partition("://")[0].lower()
    found = _backends().get(scheme)
    if found is None:
        known = ", ".join(f"{name}://" for name in sorted(_backends()))
        raise StoreError(f"unknown run store {spec!r}: use a file path, or a URL of an installed backend ({known})")
    try:
        backend: StoreBackend = found.load()
    except Exception as exc:  # a plugin that does not import: its name and why, never a traceback
        raise StoreError(f"the run store backend {scheme!r} ({found.value}) could not be loaded: {type(exc).__name__}: {exc}") from None
    return backend(spec, create=create)


def open_sqlite(spec: str, *, create: bool = True) -> RunStore:
    """The backend of ``sqlite://`` and of plain paths."""
    path = sqlite_path(spec)
    assert path is not None  # a plain path, or sqlite://
    return SqliteRunStore(path, create=create)


def open_postgres(spec: str, *, create: bool = True) -> RunStore:
    """The backend of ``postgresql://`` and ``postgres://``."""
    return PostgresRunStore(spec, create=create)


@cache
def _backends() -> dict[str, EntryPoint]:
    """The installed store backends, by URL scheme."""
    return {ep.name.lower(): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


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
