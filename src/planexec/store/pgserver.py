"""A throwaway PostgreSQL server for tests and benchmarks: a new cluster in a temporary folder, on loopback.

Owns `TempPostgres` (a context manager: ``initdb`` into a fresh folder,
``pg_ctl start`` on 127.0.0.1 and a free port with its unix socket in that
folder, trust authentication for a ``planexec`` role; then stop and delete
all of it) and `find_pg_bin` (where Debian's ``postgresql`` package put the
server binaries). PostgreSQL refuses to run as root: as root the cluster
belongs to the ``postgres`` user (Debian's package creates it) or, failing
that, ``nobody``, and the commands run through ``runuser``. No network
beyond loopback. Imports nothing from planexec.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

__all__ = ["PostgresUnavailable", "TempPostgres", "find_pg_bin"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (install Debian's ``postgresql``), or no user to run them as."""


def find_pg_bin() -> Path | None:
    """The folder with ``initdb``, ``pg_ctl`` and ``postgres``: ``$PG_BIN``, ``pg_config --bindir``, Debian's newest, or PATH."""
    candidates = [os.environ.get("PG_BIN", "")]
    if shutil.which("pg_config"):
        try:
            candidates.append(
                subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=False).stdout.strip()
            )
        except (OSError, subprocess.SubprocessError):
            pass
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)
    candidates += reversed(debian)
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).parent))
    for folder in candidates:
        if folder and all((Path(folder) / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """A PostgreSQL cluster that lives as long as the ``with`` block; `url` reaches its ``planexec`` database.

    Raises `PostgresUnavailable` when the binaries are missing, and
    `RuntimeError` with the server's log when it does not start.
    """

    def __init__(self, *, start_timeout: float = 60.0) -> None:
        found = find_pg_bin()
        if found is None:
            raise PostgresUnavailable("PostgreSQL server binaries not found (apt-get install postgresql, or set PG_BIN)")
        self.bin: Path = found
        self.start_timeout = start_timeout
        self.user: str | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(name)
                except KeyError:
                    continue
                self.user = name
                break
            if self.user is None or shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root with no 'postgres' user or no runuser to start PostgreSQL as")
        self.folder = Path(tempfile.mkdtemp(prefix="planexec-pg-"))
        self.data = self.folder / "data"
        self.socket_dir = self.folder / "sock"
        self.log = self.folder / "server.log"
        self.port = 0
        self.url = ""

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=self.folder, check=False)

    def start(self) -> Self:
        """Create the cluster and start the server; returns self."""
        self.socket_dir.mkdir()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.folder, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        done = self._run("initdb", "-D", str(self.data), "-U", "planexec", "--auth=trust", "-E", "UTF8", "--no-sync")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        self.port = _free_port()
        options = f"-h 127.0.0.1 -p {self.port} -k {self.socket_dir} -c fsync=off -c full_page_writes=off"
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", str(int(self.start_timeout)), "start"
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start ({done.returncode}): {done.stderr.strip()} {log}")
        self.url = f"postgresql://planexec@127.0.0.1:{self.port}/postgres"
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder."""
        try:
            if self.data.exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60)
        finally:
            time.sleep(0.05)
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
