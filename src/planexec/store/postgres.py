"""The run store on PostgreSQL, through psycopg 3 (``pip install 'planexec[postgres]'``).

Owns `PostgresRunStore`: connecting with a connect timeout (an unreachable
server is a `StoreError` naming the host, never a hang), keeping the
store's tables in their own schema (``planexec`` unless the URL's
``?schema=`` or the `schema` argument says otherwise), migrations on open
under an advisory lock (several processes may open at once), and the
transactions `sql.SqlRunStore` runs in. The URL is never shown with its
password. psycopg is imported when a store is opened, with an install hint.
Imports the store's `sql` and `schema`, `errors`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from planexec.errors import StoreError
from planexec.store.rows import now
from planexec.store.schema import SCHEMA_VERSION, installed_version, migrate
from planexec.store.sql import SqlRunStore

__all__ = ["PostgresRunStore"]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TABLES = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("the PostgreSQL run store needs psycopg 3: pip install 'planexec[postgres]'") from None
    return psycopg


def split_schema(url: str) -> tuple[str, str | None]:
    """The URL without planexec's own ``schema`` query parameter (libpq would refuse it), and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


class PostgresRunStore(SqlRunStore):
    """The run store in a PostgreSQL database given by a ``postgresql://`` URL.

    `schema` holds the store's tables (default: the URL's ``?schema=``,
    else ``planexec``); `connect_timeout` bounds connecting (seconds; libpq
    waits at least 2). With `create` False an empty schema is an error
    instead of a new store.
    """

    dialect = "postgres"
    for_update = " FOR UPDATE"  # a run's audit head: two writers of one run take turns

    def __init__(self, url: str, *, schema: str | None = None, connect_timeout: float = 5.0, create: bool = True) -> None:
        super().__init__()
        psycopg = _psycopg()
        self._psycopg = psycopg
        dsn, in_url = split_schema(url)
        self.schema = schema or in_url or "planexec"
        try:
            info = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            raise StoreError(f"not a PostgreSQL URL: {_first_line(exc)}") from None
        host = str(info.get("host") or info.get("hostaddr") or "localhost")
        self.host = f"{host}:{info.get('port') or 5432}"
        database = info.get("dbname") or info.get("user") or ""
        user = f"{info['user']}@" if info.get("user") else ""
        self.location = f"postgresql://{user}{self.host}/{database}?schema={self.schema}"
        if not _SCHEMA_NAME.match(self.schema):
            raise StoreError(
                f"{self.location}: schema name {self.schema!r} must be lower-case letters, digits and '_'", location=self.location
            )
        try:
            timeout = {} if info.get("connect_timeout") else {"connect_timeout": max(2, math.ceil(connect_timeout))}  # the URL's wins
            self._conn = psycopg.connect(dsn, autocommit=True, application_name="planexec", **timeout)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to the PostgreSQL run store at {self.host} (database {database!r}): {_first_line(exc)}",
                location=self.location,
            ) from None
        try:
            with self._conn.cursor() as cur:
                cur.execute(f'SET search_path TO "{self.schema}"')
                version = installed_version(cur, self._tables(cur), self.location, placeholder="%s")
                if version == 0 and not create:
                    raise StoreError(f"no run store at {self.location} (the schema holds no runs)", location=self.location)
        except psycopg.Error as exc:
            self._conn.close()
            raise self._error(exc) from None
        except StoreError:
            self._conn.close()
            raise
        if version < SCHEMA_VERSION:
            self.migrate()

    def _tables(self, cur: Any) -> set[str]:
        cur.execute(_TABLES, (self.schema,))
        return {name for (name,) in cur.fetchall()}

    def migrate(self, target: int = SCHEMA_VERSION) -> list[int]:
        """Apply the missing migrations up to `target` in one transaction (under an advisory lock); the versions applied."""
        with self.tx(write=True) as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"planexec store {self.schema}",))
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            version = installed_version(cur, self._tables(cur), self.location, placeholder="%s")
            return migrate(cur, "postgres", version, now(), target=target, placeholder="%s")

    def q(self, sql: str) -> str:
        return sql.replace("?", "%s")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        psycopg = self._psycopg
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    def _error(self, exc: Exception) -> StoreError:
        if isinstance(exc, self._psycopg.OperationalError) and self._conn.closed:
            return StoreError(f"lost the connection to the PostgreSQL run store at {self.host}: {_first_line(exc)}", location=self.location)
        return StoreError(f"the PostgreSQL run store {self.location}: {_first_line(exc)}", location=self.location)

    def _close_connection(self) -> None:
        self._conn.close()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
