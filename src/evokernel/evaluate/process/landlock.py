"""Landlock through ctypes: the kernel's unprivileged sandbox for files, TCP and signals.

`restrict(read, write, devices)` confines the calling thread (and every process it starts
later) for good: files and directories under `read` may be read and executed, under `write`
anything may be done, the character `devices` (e.g. /dev/nvidia0, /dev/null) may be opened
for reading and writing and take ioctls; every other file-system access that the running
kernel's Landlock ABI can express is denied. On ABI >= 4 binding and connecting TCP sockets
is denied too; on ABI >= 6 the process may not signal processes outside its Landlock domain
(the evaluator, other workers) nor connect to abstract unix sockets outside it. Landlock also
refuses ptrace-class access (/proc/PID/environ, /proc/PID/mem) to processes outside the domain,
on every ABI.

Call it before any thread starts (Landlock binds the calling thread) and after
PR_SET_NO_NEW_PRIVS. The constants follow linux/landlock.h; which ones exist depends on the
ABI (1: Linux 5.13, 2: REFER, 3: TRUNCATE, 4: TCP, 5: IOCTL_DEV, 6: scopes, 7: audit flags).
"""

from __future__ import annotations

import ctypes
import os
import stat

_SYS_CREATE_RULESET = 444  # the same number on every architecture
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REFER = 1 << 13
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP | CONNECT_TCP
_SCOPES = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET | SIGNAL

READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    try:
        got = _libc().syscall(
            ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )  # fmt: skip
    except (OSError, AttributeError):
        return 0
    return max(0, int(got))


def handled_fs(version: int) -> int:
    """Every file-system right `version` knows (all of them are denied unless allowed)."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def restrict(
    read: list[str], write: list[str], devices: list[str], version: int | None = None
) -> str:
    """Confine this thread and its future children; returns a label such as "landlock v7".
    Paths that do not exist are skipped. Raises OSError when the kernel refuses."""
    version = abi() if version is None else version
    if version < 1:
        raise OSError(0, "landlock is not available")
    libc = _libc()
    fs = handled_fs(version)
    attr = _RulesetAttr(fs, _NET_TCP if version >= 4 else 0, _SCOPES if version >= 6 else 0)
    size = 8 if version < 4 else (16 if version < 6 else 24)
    ruleset = _check(
        libc.syscall(
            ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "create_ruleset",
    )  # fmt: skip
    try:
        for paths, rights in ((read, READ), (write, fs), (devices, DEVICE)):
            for path in paths:
                _add(libc, ruleset, path, rights & fs)
        _check(
            libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset),
                         ctypes.c_uint32(0)),
            "restrict_self",
        )  # fmt: skip
    finally:
        os.close(ruleset)
    return f"landlock v{version}"


def _add(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS  # a rule on a file may only carry file rights
        rule = _PathBeneath(rights, fd)
        _check(
            libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                         ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)),
            f"add_rule {path}",
        )  # fmt: skip
    finally:
        os.close(fd)
