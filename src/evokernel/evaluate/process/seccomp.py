"""A seccomp filter for processes that run candidate code (x86_64; elsewhere `install` raises).

What it refuses, whatever the process's uid or capabilities (every process the candidate
starts inherits the filter and cannot remove it):

* network: `socket()`/`socketpair()` for any family but AF_UNIX (EACCES), io_uring (whose
  operations would bypass the socket check), and the 32-bit and x32 system-call tables (a
  second way in to `socketcall`; the 32-bit one kills the process);
* signals outside the worker: `kill(-1)`; `kill`, `tkill`, `tgkill`, `rt_[tg]sigqueueinfo`
  to any target but the worker itself (`self_pid`) or its own process group (0, `-pgrp`);
  `pidfd_send_signal`, `pidfd_getfd`, `ptrace`, `process_vm_readv/writev` (EPERM);
* leaving the worker's session: `setsid()` and `setpgid()` succeed without doing anything, so
  every descendant, double-forked or not, stays in the worker's process group, where one
  group kill reaches it even after the worker has died;
* new namespaces and kernel state: `unshare`, `setns`, `clone` with a CLONE_NEW* flag,
  `clone3` (ENOSYS: libc falls back to `clone`, whose flags the filter can read), mounts,
  module loading, kexec, bpf, userfaultfd, keyrings, clocks, swap, reboot, chroot,
  open_by_handle_at.

Everything else is allowed: Triton needs fork/exec (the C compiler, ptxas), CUDA its ioctls
(which Landlock confines to the allowed device files).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_AF_UNIX = 1
_CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NEW |= 0x40000000 | 0x00000080  # NEWNS UTS IPC USER PID NET CGROUP TIME

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06

# x86_64 system-call numbers (asm/unistd_64.h)
NR = {
    "socket": 41, "socketpair": 53, "clone": 56, "kill": 62, "ptrace": 101, "syslog": 103,
    "setpgid": 109, "setsid": 112, "rt_sigqueueinfo": 129, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "tkill": 200, "clock_settime": 227, "tgkill": 234, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "rt_tgsigqueueinfo": 297, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
}  # fmt: skip
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "mount",
    "umount2", "pivot_root", "chroot", "swapon", "swapoff", "reboot", "bpf", "userfaultfd",
    "unshare", "setns", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl",
    "add_key", "request_key", "open_by_handle_at", "fsopen", "fsconfig", "fsmount",
    "move_mount", "open_tree", "fspick", "mount_setattr", "acct", "syslog", "settimeofday",
    "clock_settime", "adjtimex", "quotactl",
)  # fmt: skip
SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")

_ARG0 = 16  # offsetof(struct seccomp_data, args[0]); the low 32 bits on little-endian


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _one_of(values: list[int], allow: int, deny: int) -> list[bytes]:
    """arg0 (as a 32-bit int) in `values` -> `allow`, else `deny`."""
    out = [_ins(_LD_W_ABS, _ARG0)]
    for i, value in enumerate(values):
        out.append(_ins(_JEQ, value, jt=len(values) - i, jf=0))
    return [*out, _ins(_RET, deny), _ins(_RET, allow)]


def program(self_pid: int, pgrp: int) -> bytes:
    """The filter, as raw `struct sock_filter` instructions."""
    eperm = _RET_ERRNO | errno.EPERM
    blocks: list[tuple[int, list[bytes]]] = [(NR[name], [_ins(_RET, eperm)]) for name in DENIED]
    blocks += [
        (NR["setsid"], [_ins(_RET, _RET_ERRNO | 0)]),  # "succeeds", changes nothing
        (NR["setpgid"], [_ins(_RET, _RET_ERRNO | 0)]),
        (NR["clone3"], [_ins(_RET, _RET_ERRNO | errno.ENOSYS)]),
        (NR["socket"], _one_of([_AF_UNIX], _RET_ALLOW, _RET_ERRNO | errno.EACCES)),
        (NR["socketpair"], _one_of([_AF_UNIX], _RET_ALLOW, _RET_ERRNO | errno.EACCES)),
        (
            NR["clone"],
            [
                _ins(_LD_W_ABS, _ARG0),
                _ins(_JSET, _CLONE_NEW, 0, 1),
                _ins(_RET, eperm),
                _ins(_RET, _RET_ALLOW),
            ],
        ),
    ]
    kill_targets = [0, self_pid] + ([-pgrp] if pgrp > 1 else [])
    # kill(-1) is refused before the list is consulted (a pid of 1 must never make -1 pass).
    kill = [_ins(_LD_W_ABS, _ARG0), _ins(_JEQ, -1, 0, 1), _ins(_RET, eperm)]
    kill += _one_of(kill_targets, _RET_ALLOW, eperm)
    blocks.append((NR["kill"], kill))
    for name in SIGNALS[1:]:
        blocks.append((NR[name], _one_of([self_pid], _RET_ALLOW, eperm)))

    head = [
        _ins(_LD_W_ABS, 4),  # arch
        _ins(_JEQ, _AUDIT_ARCH_X86_64, 1, 0),
        _ins(_RET, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, 0),  # nr
        _ins(_JGE, _X32_BIT, 0, 1),
        _ins(_RET, eperm),
    ]
    body: list[bytes] = []
    for nr, block in blocks:
        if len(block) > 250:
            raise ValueError("seccomp block too long for a BPF jump")
        body.append(_ins(_JEQ, nr, 0, len(block)))
        body += block
    return b"".join([*head, *body, _ins(_RET, _RET_ALLOW)])


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(self_pid: int, pgrp: int) -> str:
    """Load the filter into this process (and all its future children). Raises OSError."""
    if not supported():
        raise OSError(0, f"seccomp filter not built for {platform.machine()}")
    code = program(self_pid, pgrp)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    return "seccomp"
