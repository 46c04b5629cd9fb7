"""The sandbox's seccomp filter: a classic BPF program that bwrap loads (``--seccomp FD``) just before the code runs.

Owns `filter_program` (the program's bytes for this machine's architecture,
or None where it has no syscall table here) and `RULES`, the list of what it
refuses. Imports the stdlib only.

bwrap sets ``no_new_privs`` before it loads the filter, and the filter holds
for every process the code starts; nothing in the sandbox can remove it.
Everything not named below is allowed: the filter closes what the namespaces
and the dropped capabilities leave open to an unprivileged user, it is not an
allow-list of what Python needs.

- Sockets: ``socket`` and ``socketpair`` only for ``AF_UNIX`` (asyncio's
  self-pipe, multiprocessing); every other family (inet, inet6, netlink,
  packet, vsock, bluetooth, ...) fails with ``EAFNOSUPPORT``.
- Set-id bits: ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2`` with
  ``S_ISUID`` or ``S_ISGID`` in the mode, and ``open``, ``openat``, ``creat``,
  ``mkdir``, ``mkdirat``, ``mknod``, ``mknodat`` asking for them, fail with
  ``EPERM``: a file the code writes in the workspace belongs to the engine's
  user on disk, so a setuid bit there would be one on a host file.
- Calls whose arguments a classic BPF filter cannot read, so cannot check:
  ``openat2`` and ``clone3`` (their flags are in a struct) fail with ``ENOSYS``
  (glibc falls back to ``openat`` and ``clone``), ``io_uring_*`` (it would run
  ``socket`` and ``openat`` past this filter) with ``EPERM``.
- New user namespaces (``unshare`` or ``clone`` with ``CLONE_NEWUSER``), where
  an unprivileged user gains capabilities: ``EPERM``.
- Kernel keyrings (``add_key``, ``keyctl``, ``request_key``: per host user,
  so a channel between two calls), ``bpf``, ``perf_event_open`` and
  ``userfaultfd``: ``EPERM``.
- Another syscall ABI: a call made through the 32-bit or x32 ABI, whose
  numbers differ, kills the process (32-bit) or fails with ``ENOSYS`` (x32).

Architectures: x86_64 and aarch64. Elsewhere `filter_program` returns None
and `run_python` refuses to run code.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

__all__ = ["RULES", "Rule", "filter_program"]

# classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
# offsets in struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments (the low half first)
_NR, _ARCH = 0, 4
_X32_BIT = 0x40000000

_AF_UNIX = 1
_SETID = 0o6000  # S_ISUID | S_ISGID
_CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Rule:
    """One refusal: `syscall` fails with `errno` when `test` holds of argument `arg` (always, when `arg` is None).

    `test` is ``"not"`` (the argument is not `value`) or ``"any"`` (it has
    any bit of `value`); only an argument's low 32 bits are read, which is
    the whole of every argument checked here (an int, a mode, flags).
    """

    syscall: str
    errno: int
    arg: int | None = None
    test: str = "any"
    value: int = 0


RULES: tuple[Rule, ...] = (
    Rule("socket", errno.EAFNOSUPPORT, 0, "not", _AF_UNIX),
    Rule("socketpair", errno.EAFNOSUPPORT, 0, "not", _AF_UNIX),
    Rule("chmod", errno.EPERM, 1, "any", _SETID),
    Rule("fchmod", errno.EPERM, 1, "any", _SETID),
    Rule("fchmodat", errno.EPERM, 2, "any", _SETID),
    Rule("fchmodat2", errno.EPERM, 2, "any", _SETID),
    Rule("open", errno.EPERM, 2, "any", _SETID),
    Rule("openat", errno.EPERM, 3, "any", _SETID),
    Rule("creat", errno.EPERM, 1, "any", _SETID),
    Rule("mkdir", errno.EPERM, 1, "any", _SETID),
    Rule("mkdirat", errno.EPERM, 2, "any", _SETID),
    Rule("mknod", errno.EPERM, 1, "any", _SETID),
    Rule("mknodat", errno.EPERM, 2, "any", _SETID),
    Rule("openat2", errno.ENOSYS),
    Rule("clone3", errno.ENOSYS),
    Rule("io_uring_setup", errno.EPERM),
    Rule("io_uring_enter", errno.EPERM),
    Rule("io_uring_register", errno.EPERM),
    Rule("unshare", errno.EPERM, 0, "any", _CLONE_NEWUSER),
    Rule("clone", errno.EPERM, 0, "any", _CLONE_NEWUSER),  # the flags come first on both architectures
    Rule("add_key", errno.EPERM),
    Rule("keyctl", errno.EPERM),
    Rule("request_key", errno.EPERM),
    Rule("bpf", errno.EPERM),
    Rule("perf_event_open", errno.EPERM),
    Rule("userfaultfd", errno.EPERM),
)

# AUDIT_ARCH_* and the syscall numbers of each architecture (arch/x86/entry/syscalls, include/uapi/asm-generic/unistd.h);
# a name an architecture lacks (aarch64 has no open, chmod, ...) is simply not there to call
_ARCHES: dict[str, tuple[int, bool, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        True,
        {
            "socket": 41,
            "socketpair": 53,
            "chmod": 90,
            "fchmod": 91,
            "fchmodat": 268,
            "fchmodat2": 452,
            "open": 2,
            "openat": 257,
            "creat": 85,
            "mkdir": 83,
            "mkdirat": 258,
            "mknod": 133,
            "mknodat": 259,
            "openat2": 437,
            "clone3": 435,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "unshare": 272,
            "clone": 56,
            "add_key": 248,
            "keyctl": 250,
            "request_key": 249,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
        },
    ),
    "aarch64": (
        0xC00000B7,
        False,
        {
            "socket": 198,
            "socketpair": 199,
            "fchmod": 52,
            "fchmodat": 53,
            "fchmodat2": 452,
            "openat": 56,
            "mkdirat": 34,
            "mknodat": 33,
            "openat2": 437,
            "clone3": 435,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "unshare": 97,
            "clone": 220,
            "add_key": 217,
            "keyctl": 219,
            "request_key": 218,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
        },
    ),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _stmt(code: int, k: int) -> tuple[int, int, int, int]:
    return (code, 0, 0, k)


def _jump(code: int, k: int, if_true: int, if_false: int) -> tuple[int, int, int, int]:
    return (code, if_true, if_false, k)


def _rule(rule: Rule, number: int) -> list[tuple[int, int, int, int]]:
    """The instructions of one rule; they start and end with the syscall number in the accumulator."""
    refuse = _stmt(_RET, _ERRNO | rule.errno)
    if rule.arg is None:
        return [_jump(_JEQ, number, 0, 1), refuse]
    offset = 16 + 8 * rule.arg
    if rule.test == "not":
        check = _jump(_JEQ, rule.value, 1, 0)  # the allowed value skips the refusal
    else:
        check = _jump(_JSET, rule.value, 0, 1)  # any of the bits set falls through to the refusal
    return [_jump(_JEQ, number, 0, 4), _stmt(_LD_ABS, offset), check, refuse, _stmt(_LD_ABS, _NR)]


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one's) as bwrap reads it (struct sock_filter, native order), or None."""
    name = machine or platform.machine()
    arch = _ARCHES.get(_ALIASES.get(name, name))
    if arch is None:
        return None
    audit_arch, has_x32, numbers = arch
    program = [
        _stmt(_LD_ABS, _ARCH),
        _jump(_JEQ, audit_arch, 1, 0),
        _stmt(_RET, _KILL_PROCESS),  # another ABI's numbers mean other calls: none is allowed
        _stmt(_LD_ABS, _NR),
    ]
    if has_x32:
        program += [_jump(_JGE, _X32_BIT, 0, 1), _stmt(_RET, _ERRNO | errno.ENOSYS)]
    for rule in RULES:
        if rule.syscall in numbers:
            program += _rule(rule, numbers[rule.syscall])
    program.append(_stmt(_RET, _ALLOW))
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
