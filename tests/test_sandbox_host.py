"""What the sandbox of `run_python` holds for the host: never root, nothing global writable, bounds for the whole sandbox.

One test per attack of issue 23, each run as CI runs it (as root), each
failing on the runner before it (2a5d34d): the code ran as host root (uid
map ``1000 0 1``), wrote ``/proc/sys``, made a setuid-root copy of ``id``,
held 5 x 400 MB under a 512 MB bound, filled shared memory and socket
buffers past it, grew the workspace by the quota at every call, opened vsock
and netlink sockets, and left its cgroups behind when its engine was killed.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planexec.errors import ToolError
from planexec.workers.toolkit import python_tool
from test_sandbox import MB, needs_bwrap, run  # the escape tests' helpers (the ws fixture is in conftest)

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the engine runs as root here only when the tests do (as in CI)")


@pytest.fixture
def open_ws() -> Iterator[Path]:
    """A workspace another host user can reach (pytest's tmp dirs are 0700): to run what the code left there as them."""
    top = Path(tempfile.mkdtemp(prefix="planexec-open-"))
    top.chmod(0o755)
    path = top / "ws"
    path.mkdir(mode=0o755)
    try:
        yield path
    finally:
        shutil.rmtree(top, ignore_errors=True)


def size_of(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def numbers(stdout: str, word: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith(word + " ")]


# -- never host root ----------------------------------------------------------------------------


@needs_bwrap
def test_the_code_runs_as_an_unprivileged_host_user_and_its_files_are_the_engines(ws):
    (ws / "engine.txt").write_text("the engine's\n")
    out = run(
        python_tool(ws),
        """
        import os
        print("uid", open("/proc/self/uid_map").read().split()[1])
        print("gid", open("/proc/self/gid_map").read().split()[1])
        print("owner", os.stat("engine.txt").st_uid)
        with open("engine.txt", "a") as f:
            f.write("and the code's\\n")
        os.mkdir("made")
        open("made/new.txt", "w").write("new")
        """,
    )
    assert out["exit_code"] == 0, out
    host_uid, host_gid = numbers(out["stdout"], "uid")[0], numbers(out["stdout"], "gid")[0]
    if os.geteuid() == 0:  # (not as root, bwrap nests a second user namespace, whose map reads 1000 0 1)
        assert host_uid != 0 and host_gid != 0, out  # the sandbox's user is not host root
    assert numbers(out["stdout"], "owner") == [1000]  # the workspace is the sandbox user's own, so writable
    assert (ws / "engine.txt").read_text() == "the engine's\nand the code's\n"
    for path in (ws / "made", ws / "made" / "new.txt"):  # what it writes belongs to the engine's user on disk
        assert (path.stat().st_uid, path.stat().st_gid) == (os.geteuid(), os.getegid())


_KERNEL = r"""
import os
opened = []
def try_write(path):
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    os.close(fd)
    opened.append(path)
for top in ("/proc/sys", "/sys", "/sys/fs/cgroup"):
    for folder, _, files in os.walk(top):
        for name in files:
            try_write(os.path.join(folder, name))
for name in os.listdir("/proc"):  # sysrq-trigger, kmsg and the like; not our own processes' files
    if not name.isdigit() and name not in ("self", "thread-self") and os.path.isfile("/proc/" + name):
        try_write("/proc/" + name)
try:  # the attack itself: its current value written back
    value = open("/proc/sys/kernel/core_pattern").read()
    with open("/proc/sys/kernel/core_pattern", "w") as f:
        f.write(value)
    print("core_pattern WRITTEN")
except OSError as exc:
    print("core_pattern REFUSED", exc.errno)
print("writable", len(opened), opened[:5])
"""


@needs_bwrap
def test_no_kernel_interface_is_writable(ws):
    out = run(python_tool(ws, timeout=60), _KERNEL)
    lines = out["stdout"].splitlines()
    assert lines[0].startswith("core_pattern REFUSED") and lines[1] == "writable 0 []", out


@needs_bwrap
def test_writable_mounts_are_nosuid_nodev_and_the_code_cannot_gain_privileges(ws):
    out = run(
        python_tool(ws),
        """
        import ctypes
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            options, fstype = fields[5].split(","), fields[fields.index("-") + 1]
            device = fields[4] in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
            if "rw" in options:  # a device node (bwrap's minimal /dev) and the ptys' devpts are devices by nature
                print("rw", fields[4], fstype, "nosuid" in options, "nodev" in options or device or fstype == "devpts")
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print("no_new_privs", status["NoNewPrivs"].strip(), "seccomp", status["Seccomp"].strip())
        libc = ctypes.CDLL(None, use_errno=True)
        print("userns", libc.unshare(0x10000000), ctypes.get_errno() != 0)  # CLONE_NEWUSER
        """,
    )
    lines = out["stdout"].splitlines()
    writable = [line.split() for line in lines if line.startswith("rw ")]
    assert any(row[1] == str(ws) for row in writable), out  # the workspace is among them
    assert all(row[3:] == ["True", "True"] for row in writable), writable
    assert "no_new_privs 1 seccomp 2" in lines and "userns -1 True" in lines, out


@needs_bwrap
def test_a_setuid_copy_cannot_be_made(open_ws):
    ws = open_ws
    out = run(
        python_tool(ws),
        """
        import os, shutil
        shutil.copyfile("/usr/bin/id", "id-copy")
        os.mkdir("folder")
        for path, mode in (("id-copy", 0o4755), ("id-copy", 0o2755), ("id-copy", 0o6755), ("folder", 0o2775)):
            try:
                os.chmod(path, mode)
                print("SET", path, oct(mode))
            except OSError as exc:
                print("REFUSED", path, exc.errno)
        for flags in (os.O_CREAT | os.O_WRONLY, os.O_CREAT | os.O_WRONLY | os.O_EXCL):
            try:
                os.close(os.open("made-setuid-" + str(flags), flags, 0o4755))
                print("CREATED", oct(os.stat("made-setuid-" + str(flags)).st_mode))
            except OSError as exc:
                print("REFUSED", "open", exc.errno)
        os.chmod("id-copy", 0o755)  # an ordinary mode is still fine
        print("exec", os.access("id-copy", os.X_OK))
        """,
    )
    lines = out["stdout"].splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["REFUSED"] * 6 and lines[-1] == "exec True", out
    setid = [p for p in ws.rglob("*") if p.stat().st_mode & 0o6000]
    assert setid == [], f"setuid/setgid files were left in the workspace: {setid}"
    if os.geteuid() == 0 and shutil.which("setpriv"):  # what the attack was for: run by another user, as whom?
        seen = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(ws / "id-copy"), "-u"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert seen.stdout.strip() == "65534", seen


def test_setid_bits_left_by_a_call_are_stripped(tmp_path):
    """Behind the seccomp filter: a setuid/setgid file changed during a call loses the bits before the call returns."""
    from planexec.workers.toolkit.sandbox.disk import strip_setid

    before = tmp_path / "before"
    before.write_text("the user's own")
    os.chmod(before, 0o4755)
    since = time.time_ns()
    time.sleep(0.01)
    made = tmp_path / "sub" / "made"
    made.parent.mkdir()
    made.write_text("#!/bin/sh\n")
    os.chmod(made, 0o6755)
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert strip_setid(tmp_path, since) == ["sub/made"]
    assert made.stat().st_mode & 0o7777 == 0o755
    assert before.stat().st_mode & 0o7777 == 0o4755  # not changed by the call: left as it was


# -- sockets ------------------------------------------------------------------------------------


@needs_bwrap
def test_only_unix_sockets_can_be_created(ws):
    out = run(
        python_tool(ws),
        """
        import socket
        families = {"unix": 1, "inet": 2, "inet6": 10, "netlink": 16, "packet": 17, "vsock": 40, "bluetooth": 31, "can": 29}
        for name, family in families.items():
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):
                try:
                    socket.socket(family, kind).close()
                    print("OPENED", name, int(kind))
                except OSError:
                    pass
        a, b = socket.socketpair()
        a.sendall(b"ping")
        print("pair", b.recv(4).decode())
        try:
            socket.socketpair(socket.AF_INET)
            print("OPENED inet pair")
        except OSError:
            pass
        import asyncio
        asyncio.run(asyncio.sleep(0))  # its self-pipe is a unix socket pair
        print("asyncio ok")
        """,
    )
    # AF_UNIX takes SOCK_RAW as SOCK_DGRAM
    assert out["stdout"].splitlines() == ["OPENED unix 1", "OPENED unix 2", "OPENED unix 3", "pair ping", "asyncio ok"], out


# -- bounds for the whole sandbox ---------------------------------------------------------------


@needs_bwrap
@as_root
def test_memory_is_bounded_for_all_the_processes_together(ws):
    out = run(
        python_tool(ws, memory_mb=512, timeout=60),
        """
        import os, time
        children = []
        for i in range(5):
            pid = os.fork()
            if pid == 0:
                block = bytearray(400 * 2**20)
                for at in range(0, len(block), 4096):  # every page touched: resident, not just reserved
                    block[at] = 1
                open(f"held-{i}", "w").close()
                time.sleep(3)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        print("done")
        """,
    )
    held = sorted(p.name for p in ws.glob("held-*"))
    assert len(held) <= 1, f"{len(held)} x 400 MB were held at once under memory_mb=512: {out}"
    assert out["memory_exceeded"] and out["memory_bound"] == "sandbox", out


_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes, libc.shmat.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
size = 128 * 2**20
for i in range(16):  # 2 GiB in all, 128 MiB attached at a time
    shmid = libc.shmget(0, size, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    if shmid < 0:
        print("shmget", ctypes.get_errno())
        break
    address = libc.shmat(shmid, None, 0)
    ctypes.memset(address, 1, size)
    libc.shmdt(address)
    print("filled", (i + 1) * 128, flush=True)
"""


@needs_bwrap
@as_root
def test_shared_memory_counts_against_the_sandboxs_memory(ws):
    out = run(python_tool(ws, memory_mb=512, timeout=60), _SHM)
    filled = numbers(out["stdout"], "filled")
    assert max(filled, default=0) <= 512, f"{max(filled)} MiB of shared memory under memory_mb=512: {out}"
    assert out["memory_exceeded"], out


_SOCKETS = """
import resource, socket
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sent, pairs = 0, []
try:
    while sent < 1536 * 2**20:
        a, b = socket.socketpair()
        a.setblocking(False)
        try:
            while True:
                sent += a.send(b"x" * 65536)
        except BlockingIOError:
            pass
        pairs.append((a, b))
        if len(pairs) % 50 == 0:
            print("queued", sent // 2**20, flush=True)
except OSError as exc:
    print("stopped", exc.errno, flush=True)
print("queued", sent // 2**20, flush=True)
"""


@needs_bwrap
@as_root
def test_socket_buffers_count_against_the_sandboxs_memory(ws):
    out = run(python_tool(ws, memory_mb=256, timeout=60), _SOCKETS)
    queued = numbers(out["stdout"], "queued")
    assert queued and max(queued) <= 256, f"{max(queued, default=0)} MiB queued in socket buffers under memory_mb=256: {out}"


@needs_bwrap
def test_the_disk_quota_holds_across_the_calls_of_a_workspace(ws):
    tool = python_tool(ws, max_disk_mb=100, timeout=60)
    results = []
    for i in range(4):
        code = f"""
        import os
        block = bytes(8 * 2**20)
        for part in range(5):  # 80 MiB, under the quota on its own
            with open(f"fill-{i}-{{part}}.bin", "wb") as f:
                f.write(block)
                f.write(block)
                f.flush()
                os.fsync(f.fileno())
        print("wrote", {i})
        """
        try:
            results.append(run(tool, code))
        except ToolError as exc:
            results.append({"refused": str(exc)})
    grown = size_of(ws)
    assert grown <= (100 + 40) * MB, f"the workspace grew by {grown / MB:.0f} MiB under a 100 MiB quota: {results}"
    assert results[0]["exit_code"] == 0 and not results[0]["quota_exceeded"], results[0]
    assert results[1]["quota_exceeded"], results[1]
    for refused in results[2:]:
        assert "quota" in refused["refused"] and "No code was run" in refused["refused"], refused


# -- a killed engine ----------------------------------------------------------------------------

_ENGINE = """
import asyncio, sys
from planexec.workers.toolkit import python_tool
code = "open('started', 'w').close()\\nimport time\\ntime.sleep(60)  # " + sys.argv[2]
asyncio.run(python_tool(sys.argv[1], timeout=120).invoke({"code": code}))
"""


def _cgroup_dirs(pid: int) -> list[Path]:
    from planexec.workers.toolkit.sandbox.cgroups import cgroup_roots

    return [path for root in cgroup_roots() for path in root.path.glob(f"planexec-{pid}-*")]


def _running(token: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


@needs_bwrap
@as_root
def test_the_cgroups_of_an_engine_killed_mid_call_are_reaped_at_the_next_start(ws, tmp_path):
    token = secrets.token_hex(8)
    engine = subprocess.Popen([sys.executable, "-c", _ENGINE, str(ws), token])
    try:
        deadline = time.monotonic() + 60
        while not (ws / "started").exists():
            assert engine.poll() is None and time.monotonic() < deadline, "the engine's sandbox never started"
            time.sleep(0.05)
        left = _cgroup_dirs(engine.pid)
        assert left, "the running call has no cgroup"
    finally:
        engine.send_signal(signal.SIGKILL)
        engine.wait()
    deadline = time.monotonic() + 10
    while _running(token) and time.monotonic() < deadline:  # the sandbox dies with its engine
        time.sleep(0.05)
    assert not _running(token), "the sandbox outlived its killed engine"
    assert all(path.exists() for path in left)  # nobody removed them: the engine was killed
    other = tmp_path / "other"
    other.mkdir()
    run(python_tool(other), "print('next start')")
    assert [path for path in left if path.exists()] == []


# -- the rest of the contract -------------------------------------------------------------------


@needs_bwrap
def test_a_critics_read_only_sandbox_changes_nothing_in_the_workspace(ws):
    (ws / "data.txt").write_text("42")
    out = run(
        python_tool(ws, writable=False),
        """
        import os
        print("read", open("data.txt").read())
        for attempt in (lambda: open("data.txt", "w"), lambda: open("new.txt", "w"), lambda: os.chmod("data.txt", 0o777)):
            try:
                attempt()
                print("CHANGED")
            except OSError as exc:
                print("refused", exc.errno)
        """,
    )
    assert out["stdout"].splitlines() == ["read 42", "refused 30", "refused 30", "refused 30"], out  # EROFS
    assert sorted(p.name for p in ws.iterdir()) == ["data.txt"] and (ws / "data.txt").stat().st_mode & 0o777 != 0o777


@needs_bwrap
def test_calls_at_once_in_one_workspace_each_run_and_write(ws):
    tool = python_tool(ws)

    async def four() -> list[dict]:
        code = "import time\ntime.sleep(0.3)\nopen('call-%d', 'w').write('x')\nprint('ok')"
        return await asyncio.gather(*(tool.invoke({"code": code % n}) for n in range(4)))

    outs = asyncio.run(four())
    assert [out["stdout"] for out in outs] == ["ok\n"] * 4, outs
    made = sorted(ws.glob("call-*"))
    assert len(made) == 4 and all(path.stat().st_uid == os.geteuid() for path in made)


@needs_bwrap
@as_root
def test_a_workspace_where_no_idmapped_mount_can_be_made_is_refused_as_root(tmp_path):
    layers = {name: tmp_path / name for name in ("lower", "upper", "work", "merged")}
    for path in layers.values():
        path.mkdir()
    options = f"lowerdir={layers['lower']},upperdir={layers['upper']},workdir={layers['work']}"
    mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(layers["merged"])], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount an overlay here: {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(ToolError) as refused:
            run(python_tool(layers["merged"]), "open('ran.txt', 'w').close()")
        message = str(refused.value)
        assert "idmapped mount" in message and "No code was run" in message and str(layers["merged"]) in message
        assert not (layers["merged"] / "ran.txt").exists()
    finally:
        subprocess.run(["umount", str(layers["merged"])], check=False)


@needs_bwrap
def test_without_a_memory_cgroup_the_bound_is_per_process_and_a_warning_says_so(ws, monkeypatch, caplog):
    from planexec.workers.toolkit.sandbox import cgroups, tool

    monkeypatch.setattr(cgroups, "memory_root", lambda: None)
    tool._warn_per_process_memory.cache_clear()
    code = """
    try:
        block = bytearray(600 * 2**20)
        print("allocated")
    except MemoryError:
        print("MemoryError")
    """
    with caplog.at_level("WARNING", logger="planexec.sandbox"):
        out = run(python_tool(ws, memory_mb=512), code)
        run(python_tool(ws, memory_mb=512), "pass")
    assert out["stdout"] == "MemoryError\n" and out["memory_bound"] == "process" and not out["memory_exceeded"], out
    warnings = [r.getMessage() for r in caplog.records if "no memory cgroup" in r.getMessage()]
    assert len(warnings) == 1 and "max_processes x memory_mb" in warnings[0]  # said once, at the first call


def test_the_seccomp_filter_has_a_program_for_each_architecture_it_names():
    import struct

    from planexec.workers.toolkit.sandbox.seccomp import RULES, filter_program

    for machine in ("x86_64", "amd64", "aarch64", "arm64"):
        program = filter_program(machine)
        assert program is not None and len(program) % 8 == 0
        instructions = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        assert instructions[-1] == (0x06, 0, 0, 0x7FFF0000)  # everything not refused is allowed
        jumps = [(i, jt, jf) for i, (code, jt, jf, _) in enumerate(instructions) if code & 0x07 == 0x05]  # BPF_JMP
        assert jumps and all(i + 1 + max(jt, jf) < len(instructions) for i, jt, jf in jumps)  # every jump lands inside
    assert filter_program("riscv64") is None  # no table here: run_python refuses rather than run unfiltered
    assert {rule.syscall for rule in RULES} >= {"socket", "socketpair", "chmod", "fchmodat", "openat", "io_uring_setup", "unshare"}


# -- what a review of the first version found (each failed on it) ----------------------------------


@needs_bwrap
def test_a_tree_deeper_than_a_path_can_name_still_counts_against_the_quota(ws):
    out = run(
        python_tool(ws, max_disk_mb=5, timeout=60),
        """
        import os
        for _ in range(20):  # 20 x 251 characters: past PATH_MAX (4096), where a walk by path sees nothing
            os.mkdir("d" * 250)
            os.chdir("d" * 250)
        with open("big", "wb") as f:
            f.write(bytes(40 * 2**20))
        """,
    )
    assert out["quota_exceeded"] and any("disk quota" in note for note in out["notes"]), out


@needs_bwrap
def test_a_tree_too_deep_to_measure_counts_as_over_the_quota(ws):
    out = run(
        python_tool(ws, timeout=60),
        """
        import os
        for _ in range(300):
            os.mkdir("d")
            os.chdir("d")
        """,
    )
    assert out["quota_exceeded"] and any("nested deeper than 256" in note for note in out["notes"]), out
    with pytest.raises(ToolError, match="nested deeper than 256.*No code was run"):
        run(python_tool(ws), "print('runs')")  # and the next call cannot be measured against its quota


@needs_bwrap
def test_the_code_cannot_fake_the_wrappers_failure(ws):
    out = run(
        python_tool(ws),
        """
        import os, sys
        sys.stderr.write("planexec-sandbox: cannot join the call's cgroups\\n")
        sys.stderr.flush()
        os._exit(125)
        """,
    )
    assert out["exit_code"] == 125 and "cannot join" in out["stderr"], out  # the code's own output, not the engine's error


@needs_bwrap
def test_no_pseudo_terminal_can_be_opened(ws):
    out = run(
        python_tool(ws),
        """
        import os
        print("pts", os.path.exists("/dev/pts"), "ptmx", os.path.exists("/dev/ptmx"))
        try:
            os.openpty()
            print("OPENED")
        except OSError as exc:
            print("refused", exc.errno)
        print(sorted(os.listdir("/dev")))
        """,
    )
    lines = out["stdout"].splitlines()
    assert lines[:2] == ["pts False ptmx False", "refused 2"], out
    assert lines[2] == str(sorted(["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"]))


@needs_bwrap
@as_root
def test_calls_at_once_are_different_host_users(ws, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    hog = """
    import ctypes, time
    libc = ctypes.CDLL(None, use_errno=True)
    held = [libc.inotify_init() for _ in range(1000)]
    print("held", sum(fd >= 0 for fd in held), flush=True)
    time.sleep(2)
    """
    probe = """
    import ctypes, time
    time.sleep(0.7)
    print("uid", open("/proc/self/uid_map").read().split()[1])
    print("inotify", ctypes.CDLL(None, use_errno=True).inotify_init() >= 0)
    """

    async def both() -> list[dict]:
        return list(
            await asyncio.gather(
                python_tool(ws).invoke({"code": textwrap.dedent(hog)}), python_tool(other).invoke({"code": textwrap.dedent(probe)})
            )
        )

    held, probed = asyncio.run(both())
    assert int(held["stdout"].split()[1]) > 0, held
    assert "inotify True" in probed["stdout"], probed  # the first call's inotify instances are its own user's
    first = run(python_tool(ws), "print(open('/proc/self/uid_map').read().split()[1])")["stdout"].strip()
    assert probed["stdout"].split()[1] != "0" and first != "0"


@as_root
def test_reaping_leaves_the_groups_of_another_pid_namespace_alone():
    from planexec.workers.toolkit.sandbox import cgroups

    root = cgroups.pids_root()
    if root is None:
        pytest.skip("no pids cgroup is writable here")
    dead = 2**22 - 7  # above pid_max's default: no process has it
    mine = root.path / f"planexec-{dead}-1-{cgroups._pid_namespace()}-0badc0de"
    foreign = root.path / f"planexec-{dead}-1-{cgroups._pid_namespace() + 1}-0badc0de"
    for group in (mine, foreign):
        group.mkdir()
    try:
        removed = cgroups.reap()
        assert mine in removed and not mine.exists()
        assert foreign.exists() and foreign not in removed  # its pid means nothing in this namespace
    finally:
        for group in (mine, foreign):
            if group.exists():
                group.rmdir()


@needs_bwrap
@as_root
def test_a_directory_swapped_in_at_the_workspaces_path_is_not_mounted(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    tool = python_tool(ws)
    ws.rename(tmp_path / "moved")
    ws.symlink_to("/etc")  # what an attacker controlling the parent might do between two calls
    with pytest.raises(ToolError, match="no longer the directory run_python was made for") as refused:
        run(tool, "open('planted', 'w').close()")
    assert "No code was run" in str(refused.value) and not Path("/etc/planted").exists()


@needs_bwrap
def test_a_sandbox_that_cannot_join_its_cgroups_runs_nothing(ws, monkeypatch):
    from planexec.workers.toolkit.sandbox import cgroups

    monkeypatch.setattr(cgroups.CallCgroups, "procs_files", property(lambda self: [Path("/proc/version")]))  # not writable
    with pytest.raises(ToolError, match="could not put the sandbox in its cgroups.*No code was run"):
        run(python_tool(ws), "open('ran', 'w').close()")
    assert not (ws / "ran").exists()
