"""A Python runner for role workers: `python_tool`, its `PythonRun` record, `sandbox_available`.

Model-written code runs in a child interpreter (``sys.executable -I``)
inside a bubblewrap (``bwrap``, 0.8 or newer) sandbox whose working
directory is the workspace. The modules: `tool` (a call's life), `command`
(the command line), `stage` and `stage_helper` (the namespaces a root
engine needs), `cgroups` (pids and memory bounds, cleanup), `seccomp` (the
filter), `disk` (the quota, set-id bits), `probe` (can it run here).

What the sandbox guarantees (measured on Linux 6.18, bwrap 0.8.0, 2 cores,
the engine as root as in CI; each has a test in ``tests/test_sandbox.py``
or ``tests/test_sandbox_host.py``):

- Who the code is: uid and gid 1000 in its own user namespace, with no
  capabilities, ``no_new_privs`` set and no way to make another user
  namespace. On the host that user is the engine's own uid, except when the
  engine is root: then it is uid and gid 2147418112 + n (`stage.HOST_ID`,
  no user of the host), never root, where n numbers the calls running at
  once, so that two calls share no per-user kernel limit. The workspace is an idmapped mount for it:
  files root owns there appear as the sandbox user's, and what the code
  writes is owned by root on disk, as if the engine had written it. Files
  of other host users in the workspace are read by their mode and not
  writable.
- What it can write: the workspace (read-only for a critic's check), and
  its private ``/tmp`` and ``/dev/shm`` (tmpfs of ``scratch_mb`` each). The
  root of the sandbox, ``/proc`` (so ``/proc/sys``, ``sysrq-trigger``...)
  and ``/dev`` (six device nodes, no pseudo-terminals) are read-only;
  ``/sys`` and the host's cgroups are absent. Every writable mount is
  ``nosuid,nodev``. Setuid and setgid bits cannot
  be set (the seccomp filter); a set-id file changed during a call is
  swept of its bits before the call returns (`PythonRun.setid_stripped`).
- What it can read: only what the interpreter needs, read-only: ``/usr``,
  ``/bin``, ``/sbin``, ``/lib*``, the interpreter's prefixes and stdlib, of
  ``/etc`` only ``ld.so.cache``, ``localtime``, ``alternatives`` and a
  generated ``passwd``/``group``. No ``/etc/shadow``, ``/home``, ``/root``,
  ``/work`` or host ``/tmp``. A hard link out of the workspace fails.
- Network and sockets: a network namespace whose loopback is down (no
  connect, even to the host's 127.0.0.1; no DNS) and, through the seccomp
  filter, no socket but ``AF_UNIX``: no inet, netlink, packet or vsock.
  See `seccomp` for every call the filter refuses.
- Processes: PID, IPC, UTS and cgroup namespaces, ``--new-session``; at
  most ``max_processes`` tasks at once through a pids cgroup, and
  ``RLIMIT_NPROC`` besides (it binds the sandbox user, the call's own).
- Memory: ``memory_mb`` for all of a call's processes together, through a
  memory cgroup that also counts tmpfs, shared memory and socket buffers
  (`cgroups`); a process killed for it sets `PythonRun.memory_exceeded`.
  Where no memory cgroup is writable (an engine that is not root, as a
  rule), a warning says so at the first call and ``memory_mb`` bounds each
  process (``RLIMIT_AS``; `PythonRun.memory_bound` is ``process``).
  ``RLIMIT_AS`` per process is kept in both cases.
- Disk: ``RLIMIT_FSIZE`` per file (``max_file_mb``); the workspace's growth
  over all the calls of one run bounded by ``max_disk_mb`` (`disk`),
  watched every 25 ms, walked by descriptor; past it, or when it cannot be
  measured, the call is killed (`quota_exceeded`, `PythonRun.notes` says
  why) and later calls of the run are refused.
- Time and output: ``timeout`` wall-clock seconds (and ``RLIMIT_CPU``),
  ``max_output`` bytes kept of stdout and of stderr.
- The environment: PATH, HOME (the workspace), LANG, LC_ALL and
  MALLOC_ARENA_MAX only; the engine's (API keys) is in no process the code
  can see, not even through ``/proc``.
- The end: when the code exits, times out, goes over quota or the step is
  cancelled, bwrap is killed, its init with it, every process in the
  namespace with that, and the call's cgroups are emptied and removed; an
  engine killed mid-call takes its sandbox with it, and its cgroups are
  reaped at the next call of any engine.

Where bwrap is missing, cannot make its namespaces, has no filter for this
architecture, or (as root) the workspace's file system refuses an idmapped
mount, `run_python` raises `ToolError` naming the problem and runs nothing;
nothing weaker is used in its place. `sandbox_available()` says whether a
run can happen here.
"""

from planexec.workers.toolkit.sandbox.probe import sandbox_available
from planexec.workers.toolkit.sandbox.tool import PythonRun, python_tool

__all__ = ["PythonRun", "python_tool", "sandbox_available"]
