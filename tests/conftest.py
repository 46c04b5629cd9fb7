"""Test-suite guards: no real model requests, no network beyond loopback."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from planexec.models import block_model_requests

block_model_requests()

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> object:
    host = address[0] if isinstance(address, tuple) else None
    if host is not None and self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = host == "localhost"
        if not ok:
            raise ConnectionRefusedError(f"tests may only connect to loopback, not {host!r}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]


@pytest.fixture
def registry():
    """A registry with the built-ins loaded."""
    from planexec import Registry

    return Registry.default()


@pytest.fixture
def ws(tmp_path):
    """A sandbox's workspace: a directory inside pytest's tmp dir, so its sibling is a place just outside it."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def allow_requests():
    """Real model requests on for one test (the suite blocks them), restored afterwards."""
    from planexec.models import base

    previous = base._requests_allowed
    block_model_requests(False)
    yield
    block_model_requests(not previous)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real ``python -m llama_cpp.server`` with the bundled SmolLM2 on a free loopback port; its /v1 URL."""
    pytest.importorskip("llama_cpp.server", reason="needs pip install 'llama-cpp-python[server]==0.3.36'")
    from planexec.errors import ModelError
    from planexec.models.local import default_model_path

    try:
        path = default_model_path()
    except ModelError as e:
        pytest.skip(str(e))
    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(path),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192"]  # fmt: skip
    # a file, not a pipe: the server's load log alone can fill a pipe's buffer and block it
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer GET /v1/models within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL cluster (initdb in a temp folder, loopback, a free port) for the session; its URL.

    ``$PLANEXEC_TEST_POSTGRES`` names an existing server instead. Skipped
    only when the PostgreSQL server binaries are absent (Debian's
    ``postgresql`` package: ``.ci/run`` installs it).
    """
    import os

    from planexec.store.pgserver import PostgresUnavailable, TempPostgres

    given = os.environ.get("PLANEXEC_TEST_POSTGRES")
    if given:
        yield given
        return
    try:
        server = TempPostgres()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL to test against: {exc}")
    with server:
        yield server.url


@pytest.fixture(autouse=True)
def _run_store_in_tmp(tmp_path, monkeypatch):
    """Runs the CLI records go to a store in the test's own folder, never the project's .planexec/."""
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "planexec-runs.db"))


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request, tmp_path):
    """Fresh run stores of one backend (each test runs on SQLite and on a real PostgreSQL).

    ``stores()`` opens a new, empty store and returns it; ``stores.url(store)``
    is where it lives, so a second connection (another process's view) can
    ``open_store`` it. Every store it opened is closed after the test (a store
    left open keeps its leases' heartbeat beating until the interpreter exits).
    """
    import uuid

    from planexec.store import open_store

    urls: dict[int, str] = {}
    opened: list = []
    base = request.getfixturevalue("postgres_url") if request.param == "postgres" else None

    def new():
        name = uuid.uuid4().hex[:12]
        url = str(tmp_path / f"store-{name}.db") if base is None else f"{base}?schema=t_{name}"
        store = open_store(url)
        urls[id(store)] = url
        opened.append(store)
        return store

    new.url = lambda store: urls[id(store)]  # type: ignore[attr-defined]
    new.backend = request.param  # type: ignore[attr-defined]
    yield new
    for store in opened:
        store.close()
