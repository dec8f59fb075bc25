"""Entering the sandbox: what a worker process does first, before it imports anything heavy or
starts a thread. Child side; only the standard library.

`enter(conf)` applies every layer the parent asked for (`Confinement.layers`) that the system
allows, in this order, and returns the labels of the layers that hold:

  cgroup    join the cgroup the parent made for this worker (the parent kills it as a whole)
  netns     a new network namespace: only a loopback interface, down (new mount namespace
            too; as non-root inside a new user namespace mapping only our own uid)
  pidns     a new PID namespace with a fresh /proc: the worker is its init, so when it dies the
            kernel kills every process left in it; processes outside are invisible. The process
            the parent started stays outside as a relay that only waits and mirrors the exit
  rlimits   no core files, a file-size cap, and (with a dedicated uid) a process cap
  uid       as root: uid/gid 65534 when the interpreter and the source tree are readable to it,
            else uid 0 without any capability (bounding set dropped, securebits locked)
  landlock  reads only where the worker needs them, writes only in its scratch directory and
            its own /proc/PID (the CUDA driver fails to initialise without it), no TCP, no
            signals or abstract sockets outside its domain (see landlock.py)
  seccomp   no network sockets, no signals outside the worker, no new sessions, namespaces,
            mounts, ptrace (see seccomp.py)

A layer the kernel refuses is left out (the parent reads the labels and refuses to run
candidates without the ones it requires). The layers never weaken each other: each later one
only removes rights.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
from dataclasses import asdict, dataclass, field

LAYERS = ("cgroup", "netns", "pidns", "rlimits", "uid", "landlock", "seccomp")
NOBODY = 65534

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_NO_NEW_PRIVS = 38
_SECUREBITS_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP, both locked; KEEP_CAPS locked off


@dataclass(frozen=True)
class Confinement:
    """What the parent allows one worker. Travels as JSON on the worker's command line."""

    scratch: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    layers: tuple[str, ...] = LAYERS
    uid: int | None = None  # as root, drop to this uid/gid (None: keep uid 0, drop capabilities)
    cgroup: str | None = None
    fsize_bytes: int = 0
    nproc: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Confinement:
        data = json.loads(text)
        for key in ("read", "write", "devices", "layers"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _namespaces(conf: Confinement, libc: ctypes.CDLL) -> list[str]:
    """unshare(2) the network (+ mount) and PID namespaces; [] when the kernel refuses."""
    want_net, want_pid = "netns" in conf.layers, "pidns" in conf.layers
    if not (want_net or want_pid):
        return []
    root = os.geteuid() == 0
    uid, gid = os.geteuid(), os.getegid()
    tries = [(want_net, want_pid)] + ([(want_net, False)] if want_pid and want_net else [])
    for net, pid in tries:
        flags = _CLONE_NEWNS | (_CLONE_NEWNET if net else 0) | (_CLONE_NEWPID if pid else 0)
        if not root:
            flags |= _CLONE_NEWUSER
        if libc.unshare(flags) != 0:
            continue
        if not root:  # map only our own ids: files we own stay ours, nothing else is mapped
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        # Mounts made here must never propagate back to the host's namespace.
        _call(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")
        return (["netns"] if net else []) + (["pidns"] if pid else [])
    return []


def _relay(child: int) -> None:
    """The process outside the new PID namespace: close everything but stdout/stderr, wait for
    the worker (the namespace's init) and leave the same way it did."""
    # (/proc now shows the new namespace, where this process does not exist: no fd listing.)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(3, limit if 0 < limit < 1 << 20 else 4096)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _enter_pidns(libc: ctypes.CDLL) -> bool:
    """Fork into the new PID namespace; the child mounts a fresh /proc (which CUDA needs to
    find itself) and goes on as the worker. False (and no fork left behind) when /proc cannot
    be mounted: then this process goes on outside the PID namespace."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        ok = libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
        os.write(write_fd, b"1" if ok == 0 else b"0")
        os.close(write_fd)
        if ok != 0:
            os._exit(0)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return True
    os.close(write_fd)
    answer = os.read(read_fd, 1)
    os.close(read_fd)
    if answer != b"1":
        os.waitpid(pid, 0)
        return False
    _relay(pid)
    return True  # not reached


def _rlimits(conf: Confinement, dedicated_uid: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if conf.fsize_bytes > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (conf.fsize_bytes, conf.fsize_bytes))
    if conf.nproc > 0 and dedicated_uid:  # counts every process of the uid: only our own
        resource.setrlimit(resource.RLIMIT_NPROC, (conf.nproc, conf.nproc))


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """No capability left, none to regain by exec (bounding set empty, NOROOT locked)."""
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_NOROOT, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2): all empty
    _call(libc.capset(header, data), "capset")


def _identity(conf: Confinement, libc: ctypes.CDLL) -> str:
    if os.geteuid() == 0 and conf.uid is not None:
        os.setgroups([])
        os.setgid(conf.uid)
        os.setuid(conf.uid)
        return f"uid {conf.uid}"
    _drop_capabilities(libc)
    return f"uid {os.geteuid()} without capabilities"


def enter(conf: Confinement) -> list[str]:
    """Apply the layers; returns the labels of those that hold (see the module docstring).
    The caller must be single-threaded. May fork (pidns): the parent side never returns."""
    from evokernel.evaluate.process import landlock, seccomp

    libc = _libc()
    active: list[str] = []
    if "cgroup" in conf.layers and conf.cgroup:
        try:
            _write(os.path.join(conf.cgroup, "cgroup.procs"), "0")
            active.append("cgroup")
        except OSError:
            pass
    spaces = _namespaces(conf, libc)
    if "pidns" in spaces and not _enter_pidns(libc):
        spaces.remove("pidns")
    active += spaces
    dedicated = os.geteuid() == 0 and conf.uid is not None
    if "rlimits" in conf.layers:
        _rlimits(conf, dedicated)
        active.append("rlimits")
    if "uid" in conf.layers:
        active.append(_identity(conf, libc))
    # setuid clears the parent-death signal: arm it (again) now; adopt orphaned descendants.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _call(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if "landlock" in conf.layers:
        with contextlib.suppress(OSError):
            # The CUDA driver needs more than reading in its own /proc/PID (measured on an
            # H100 host: cudaGetDeviceCount error 304 otherwise); everything there is the
            # worker's own, and Landlock resolves /proc/PID/root & co. to their real targets.
            write = [conf.scratch, *conf.write, f"/proc/{os.getpid()}"]
            active.append(landlock.restrict(list(conf.read), write, list(conf.devices)))
    if "seccomp" in conf.layers:
        with contextlib.suppress(OSError):
            active.append(seccomp.install(os.getpid(), os.getpgrp()))
    return active
