"""A throwaway Ray cluster on this machine's loopback, for tests and benchmarks: nodes on 127.0.0.2, 127.0.0.3, ...

Owns `TempRayCluster` (a context manager: ``ray start --head`` on the
first node's address, ``ray start --address`` for each other node, token
authentication on, everything in a short temporary folder; then every
process of the cluster stopped and the folder deleted), `RayNode` (one
node's address, CPUs and custom resources) and `RayUnavailable`.

Each node is its own ``ray start`` in a new session, and stopping kills the
processes of those sessions by their ids, never Ray's processes by name:
another cluster on the machine is left alone. ``ray start`` would rewrite
127.0.0.1 to the machine's address, so the nodes take 127.0.0.2 and up
(Linux routes all of 127.0.0.0/8 to loopback). A process that drives runs
on the cluster needs `env`'s ``RAY_AUTH_MODE`` and ``RAY_AUTH_TOKEN_PATH``
before it imports Ray (Ray reads them then). Linux only (the processes
are found in /proc). No network beyond loopback,
nothing downloaded (the dashboard is off). Imports nothing from planexec
and not Ray itself: the nodes are started with ``python -m ray.scripts.scripts``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

__all__ = ["RayNode", "RayUnavailable", "TempRayCluster"]

_OBJECT_STORE_BYTES = 100_000_000  # per node: Ray's default takes 30% of the machine's memory


class RayUnavailable(RuntimeError):
    """Ray is not installed (``pip install 'planexec[ray]'``), or a node did not start (its log's end says why)."""


@dataclass(frozen=True)
class RayNode:
    """One node: its loopback address, its CPUs and its custom resources (name -> amount)."""

    ip: str
    num_cpus: int = 1
    resources: dict[str, float] = field(default_factory=dict)


class TempRayCluster:
    """A Ray cluster of `nodes` (default: two of one CPU, at 127.0.0.2 and 127.0.0.3) in a fresh folder; see the module docstring.

    `address` is the head's ``host:port``; `env` is this process's
    environment plus what a driver needs (the token's mode and file, and
    `pythonpath` in front of ``PYTHONPATH``, which the nodes' workers get too).
    """

    def __init__(self, nodes: list[RayNode] | None = None, *, pythonpath: str | None = None, start_timeout: float = 120.0) -> None:
        if importlib.util.find_spec("ray") is None:
            raise RayUnavailable("Ray is not installed: pip install 'planexec[ray]'")
        self.nodes = nodes if nodes is not None else [RayNode("127.0.0.2"), RayNode("127.0.0.3")]
        if not self.nodes:
            raise ValueError("a cluster needs a head node")
        self.start_timeout = start_timeout
        self.folder = Path(tempfile.mkdtemp(prefix="pxray-", dir="/tmp"))  # short: Ray's unix sockets live under it
        token = self.folder / "token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        paths = [p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p]
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        if paths:
            self.env["PYTHONPATH"] = os.pathsep.join(paths)
        self.port = _free_port()
        self.address = f"{self.nodes[0].ip}:{self.port}"
        self._sessions: set[int] = set()

    def start(self) -> Self:
        """Start the head, then every other node; `RayUnavailable` (after stopping what started) when one fails."""
        try:
            head, *others = self.nodes
            self._ray_start(
                head,
                ["--head", f"--port={self.port}", "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                 f"--ray-client-server-port={_free_port()}", f"--temp-dir={self.folder / 'ray'}"],
            )  # fmt: skip
            for node in others:
                self._ray_start(node, [f"--address={self.address}"])
        except BaseException:
            self.stop()
            raise
        return self

    def _ray_start(self, node: RayNode, args: list[str]) -> None:
        log = self.folder / f"node-{node.ip}.log"
        command = [
            sys.executable, "-m", "ray.scripts.scripts", "start", *args, f"--node-ip-address={node.ip}", f"--num-cpus={node.num_cpus}",
            f"--object-store-memory={_OBJECT_STORE_BYTES}", f"--dashboard-agent-listen-port={_free_port()}", "--disable-usage-stats",
        ]  # fmt: skip
        if node.resources:
            command.append(f"--resources={json.dumps(node.resources)}")
        with log.open("ab") as out:
            process = subprocess.Popen(
                command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its daemons stay in this session: `stop` finds them by it
            )
            self._sessions.add(process.pid)
            try:
                code = process.wait(timeout=self.start_timeout)
            except subprocess.TimeoutExpired:
                code = None
        if code != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise RayUnavailable(f"ray start for node {node.ip} {'timed out' if code is None else f'exited with {code}'}:\n{tail}")

    def stop(self) -> None:
        """Kill every process of the cluster's sessions, wait for them to go, delete the folder."""
        for pid in _session_pids(self._sessions):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _session_pids(self._sessions) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._sessions.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _session_pids(sessions: set[int]) -> list[int]:
    """The live processes (not zombies) whose session is one of `sessions`."""
    if not sessions:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2 :].split()[:4]  # after "pid (comm) "
        if int(session) in sessions and state != "Z":
            pids.append(int(entry.name))
    return pids
