"""Whether a sandbox can run here: `sandbox_problem` (why not, or None) and `sandbox_available`.

Owns the one-time check, per bwrap binary, that runs an empty program in a
sandbox built exactly as a call's (as root: through a stage of a throwaway
workspace). Imports the stdlib and the sandbox's `command`, `seccomp` and
`stage` modules.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile

from planexec.workers.toolkit.sandbox.command import ENV, Launch, bind_sources, command, system_binds
from planexec.workers.toolkit.sandbox.seccomp import filter_program
from planexec.workers.toolkit.sandbox.stage import StageError, discard, release, stage_for

__all__ = ["INSTALL", "data_fd", "sandbox_available", "sandbox_problem"]

INSTALL = "install it with `apt-get install bubblewrap` (Debian, Ubuntu) or `dnf install bubblewrap` (Fedora)"


def data_fd(data: bytes) -> int:
    """A memory file holding `data`, read from the start: what bwrap copies into the sandbox or loads as a filter."""
    fd = os.memfd_create("planexec-sandbox", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@functools.cache
def sandbox_problem(bwrap: str | None) -> str | None:
    """Why code cannot run in a bubblewrap sandbox here, or None when it can (checked once per binary)."""
    if bwrap is None or not os.access(bwrap, os.X_OK) or not os.path.isfile(bwrap):
        where = "on PATH" if bwrap is None else f"at {bwrap!r}"
        return f"run_python needs bubblewrap (bwrap), which is not installed {where}; {INSTALL}. No code was run."
    program = filter_program()
    if program is None:
        return (
            f"run_python has no seccomp filter for this machine's architecture ({os.uname().machine}; it has x86_64 "
            "and aarch64), and runs no code without one. No code was run."
        )
    nsenter = shutil.which("nsenter") or ""
    if os.geteuid() == 0 and not nsenter:
        return "run_python needs nsenter (util-linux) when the engine runs as root: apt-get install util-linux. No code was run."
    workspace = tempfile.mkdtemp(prefix="planexec-probe-")
    os.chmod(workspace, 0o755)  # bound as it is (no idmap): the sandbox's user must be able to enter it
    binds = system_binds()
    stage = None
    fd = data_fd(program)
    try:
        if os.geteuid() == 0:
            st = os.stat(workspace)
            stage = stage_for(workspace, bind_sources(binds), (st.st_dev, st.st_ino), idmap=False)
        launch = Launch(bwrap, nsenter, workspace, True, binds, {}, fd, dict(ENV), 2**20, stage)
        argv = command(launch, [sys.executable, "-I", "-S", "-c", "pass"])
        done = subprocess.run(argv, capture_output=True, env=dict(ENV), timeout=30, check=False, pass_fds=launch.fds)
    except StageError as exc:
        return f"{exc}. No code was run."
    except (OSError, subprocess.SubprocessError) as exc:
        return f"run_python cannot start bubblewrap at {bwrap!r}: {exc}. No code was run."
    finally:
        os.close(fd)
        if stage is not None:
            release(stage)
            discard(workspace)
        shutil.rmtree(workspace, ignore_errors=True)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip() or f"exit status {done.returncode}"
        return (
            f"run_python needs bubblewrap (bwrap 0.8 or newer) to create user, PID and network namespaces, "
            f"and {bwrap!r} cannot here ({why}): enable unprivileged user namespaces "
            f"(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0) or allow them in the "
            f"container, or {INSTALL}. No code was run."
        )
    return None


def sandbox_available(bwrap: str | None = None) -> bool:
    """Whether `run_python` can run code here: bubblewrap (`bwrap`, or the one on PATH) works and processes can be capped."""
    return sandbox_problem(bwrap if bwrap is not None else shutil.which("bwrap")) is None
