"""The durable run store: every run's events as an append-only log, with snapshots that make reads fast.

Owns nothing itself; it gathers the store's public names. `RunStore` (in
`base`) is the protocol; `SqliteRunStore` (the embedded default,
``.planexec/runs.db``) and `PostgresRunStore` (``postgresql://...``) are
its backends; `open_store` picks one from a path or URL; `replay` rebuilds
each step's record from stored events. `recorder.record_run` writes a live
run into a store. `verify_run` checks a run's records against their hash
chain (the audit log, see `audit`) and returns an `AuditReport`;
`require_intact` refuses a run whose records changed (`TamperedError`)
before a face acts on it. The store
imports only events, plan, results, records, errors and usage: never the
engine.
"""

from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.replay import RunView, replay
from planexec.engine.resume import DECISIONS, ResumeError, resolve_step
from planexec.errors import (
    ApprovalError,
    EventConflictError,
    RunNotFoundError,
    StoreError,
    TamperedError,
    TemplateNotFoundError,
)
from planexec.store.audit import AuditProblem, AuditReport, ProblemKind, require_intact, verify_run
from planexec.store.base import Approval, ApprovalState, RunStore, RunSummary, Template
from planexec.store.check import StoreCheck, check_store
from planexec.store.location import DEFAULT_STORE, STORE_ENV, open_store, sqlite_path, store_target
from planexec.store.postgres import PostgresRunStore
from planexec.store.schema import SCHEMA_VERSION
from planexec.store.sqlite import SqliteRunStore

__all__ = [
    "DECISIONS",
    "DEFAULT_STORE",
    "SCHEMA_VERSION",
    "STORE_ENV",
    "Approval",
    "ApprovalError",
    "ApprovalState",
    "AuditProblem",
    "AuditReport",
    "DurableRunner",
    "EventConflictError",
    "PostgresRunStore",
    "ProblemKind",
    "ResumeError",
    "RunNotFoundError",
    "RunStore",
    "RunSummary",
    "RunView",
    "SqliteRunStore",
    "StoreCheck",
    "StoreError",
    "TamperedError",
    "Template",
    "TemplateNotFoundError",
    "check_store",
    "open_store",
    "record_run",
    "replay",
    "require_intact",
    "resolve_step",
    "sqlite_path",
    "store_target",
    "verify_run",
]
