"""What a worker process may see and do: the parent's half of the sandbox.

* `confinement(...)`: the paths it may read (the interpreter, site-packages, the source tree,
  system libraries and the driver's, /proc, /sys, /etc), the one it may write (its private
  scratch directory), the device files it may use (/dev/null & co., /dev/nvidia*), the uid it
  drops to, and the layers to apply (confine.py applies them in the child).
* `child_env(...)`: an allowlist, never the parent's environment: PATH, locale, CUDA_*/NVIDIA_*
  device selection, LD_LIBRARY_PATH, the tool paths Triton reads, and what the evaluator sets
  (HOME, TMPDIR and every cache inside the scratch directory, PYTHONPATH, thread counts). An
  API key in the parent's environment never reaches candidate code.
* `redact(text)`: a second line of defence for text that leaves a worker (stdout/stderr tails,
  exception messages, tracebacks): values of the parent's environment that the worker was not
  given are cut out.
* `isolation_status()`: which layers a sandboxed process actually gets on this machine
  (measured once by starting one), and whether that is enough to run untrusted code.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import site
import stat
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path

import evokernel
from evokernel.evaluate.process.confine import LAYERS, NOBODY, Confinement

# Without these two a process is not isolated: Landlock holds the file system (and TCP,
# signals on newer kernels), seccomp the network, signals and sessions on every kernel.
REQUIRED = ("landlock", "seccomp")
SYSTEM_READ = (
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc",
    "/sys", "/run/nvidia-persistenced", "/var/lib/nvidia", "/usr/local/cuda",
)  # fmt: skip
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_PASS_PREFIXES = ("LC_", "CUDA_", "NVIDIA_")
_PASS = ("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CC", "CXX")
_TRITON_TOOLS = (
    "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
    "TRITON_LIBDEVICE_PATH",
)  # fmt: skip
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|CRED|AUTH|COOKIE|SESSION", re.I)
DISABLE_ENV = "EVOKERNEL_SANDBOX_DISABLE"  # comma-separated layers an operator switches off


def package_root() -> str:
    return str(Path(evokernel.__file__).resolve().parent.parent)


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.update(sysconfig.get_paths().values())
    paths.update(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str) and os.path.isdir(user):
        paths.add(user)
    paths.update(p for p in sys.path if p and os.path.exists(p))
    return sorted(p for p in paths if p)


def _env_paths(env: dict[str, str]) -> list[str]:
    found = []
    for key in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", *_TRITON_TOOLS):
        found += [p for p in env.get(key, "").split(os.pathsep) if p and os.path.isabs(p)]
    return found


def read_paths(env: dict[str, str], extra: tuple[str, ...] = ()) -> list[str]:
    paths = [*SYSTEM_READ, *_python_paths(), package_root(), *_env_paths(env), *extra]
    return sorted({os.path.abspath(p) for p in paths if os.path.exists(p)})


def device_paths() -> list[str]:
    nvidia = glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")
    return [p for p in (*DEVICES, *nvidia) if os.path.exists(p)]


def _open_to_others(path: str) -> bool:
    """True when a process of another uid can reach `path` (x on every ancestor directory)
    and read it (r on the path)."""
    p = Path(path).resolve()
    try:
        for parent in reversed(p.parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(p).st_mode
    except OSError:
        return False
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


@functools.lru_cache(maxsize=1)
def drop_uid() -> int | None:
    """NOBODY when running as root and the interpreter and the source tree are readable to
    other users (a worker running as nobody could not start otherwise); else None."""
    if os.geteuid() != 0:
        return None
    needed = [sys.executable, os.path.realpath(sys.executable), sys.base_prefix, package_root()]
    needed += site.getsitepackages()
    return NOBODY if all(_open_to_others(p) for p in needed if os.path.exists(p)) else None


def disabled_layers() -> set[str]:
    return {x.strip() for x in os.environ.get(DISABLE_ENV, "").split(",") if x.strip()}


def confinement(
    scratch: str,
    *,
    env: dict[str, str],
    read: tuple[str, ...] = (),
    write: tuple[str, ...] = (),
    cgroup: str | None = None,
    fsize_bytes: int = 0,
    skip: tuple[str, ...] = (),
) -> Confinement:
    off = disabled_layers() | set(skip)
    return Confinement(
        scratch=scratch,
        read=tuple(read_paths(env, read)),
        write=tuple(os.path.abspath(p) for p in write),
        devices=tuple(device_paths()),
        layers=tuple(x for x in LAYERS if x not in off),
        uid=drop_uid(),
        cgroup=cgroup,
        fsize_bytes=fsize_bytes,
        nproc=4096,
    )


def child_env(
    scratch: Path, *, triton_interpret: str | None, threads: int, extra: dict[str, str] | None
) -> dict[str, str]:
    """The worker's whole environment (nothing else of the parent's is passed)."""
    parent = os.environ
    env = {k: v for k, v in parent.items() if k in _PASS or k.startswith(_PASS_PREFIXES)}
    env.update({k: parent[k] for k in _TRITON_TOOLS if k in parent})
    pythonpath = [package_root(), *parent.get("PYTHONPATH", "").split(os.pathsep)]
    home = scratch / "home"
    env.update(
        HOME=str(home),
        TMPDIR=str(scratch / "tmp"),
        XDG_CACHE_HOME=str(home / ".cache"),
        CUDA_CACHE_PATH=str(home / ".nv"),
        TRITON_HOME=str(home),
        TRITON_CACHE_DIR=str(scratch / "triton"),
        TORCH_EXTENSIONS_DIR=str(scratch / "torch_extensions"),
        PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in pythonpath if p),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
    )
    user_base = site.getuserbase()
    if os.path.isdir(site.getusersitepackages()):
        env["PYTHONUSERBASE"] = user_base  # the packages stay found with HOME moved
    if triton_interpret is not None:
        env["TRITON_INTERPRET"] = triton_interpret
    env.update(extra or {})
    return env


def _secret_values(given: dict[str, str] | None = None) -> list[str]:
    given_values = set((given or {}).values())
    found = []
    for name, value in os.environ.items():
        if len(value) < 4 or value in given_values:
            continue
        looks_secret = bool(_SECRET_NAME.search(name))
        if looks_secret or (len(value) >= 12 and not value.startswith(("/", "~"))):
            found.append(value)
    return sorted(found, key=len, reverse=True)


def redact(text: str, given: dict[str, str] | None = None) -> str:
    """`text` with every value of the parent's environment that the worker was not given
    (`given`: its environment) replaced by "[redacted]"."""
    if not text:
        return text
    for value in _secret_values(given):
        if value in text:
            text = text.replace(value, "[redacted]")
    return text


# --- what this machine gives ---------------------------------------------------------------


@dataclass(frozen=True)
class Isolation:
    """The layers a sandboxed process got on this machine."""

    layers: tuple[str, ...]
    detail: str = ""

    @property
    def isolated(self) -> bool:
        return all(any(x.startswith(r) for x in self.layers) for r in REQUIRED)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(r for r in REQUIRED if not any(x.startswith(r) for x in self.layers))

    @property
    def line(self) -> str:
        if not self.layers:
            return f"sandbox: none ({self.detail or 'no layer available'})"
        text = f"sandbox: {', '.join(self.layers)}"
        return text if self.isolated else f"{text} (missing: {', '.join(self.missing)})"


_STATUS: list[Isolation] = []
_STATUS_LOCK = threading.Lock()


def isolation_status() -> Isolation:
    """Start one sandboxed process (a bare interpreter, ~0.1 s, once per evaluator process)
    and report the layers it got."""
    import shutil
    import tempfile

    with _STATUS_LOCK:
        if _STATUS:
            return _STATUS[0]
        from evokernel.evaluate.process.cgroup import Cgroup

        scratch = tempfile.mkdtemp(prefix="evokernel-probe-")
        cgroup = None
        try:  # from here the scratch directory (and any cgroup) is removed whatever happens
            cgroup = Cgroup.create()
            uid = drop_uid()
            if uid is not None:
                os.chown(scratch, uid, uid)
            env = child_env(Path(scratch), triton_interpret=None, threads=1, extra=None)
            conf = confinement(scratch, env=env, cgroup=cgroup.path if cgroup else None)
            cmd = [sys.executable, "-m", "evokernel.evaluate.process.probe", conf.to_json()]
            try:
                out = subprocess.run(
                    cmd, env=env, cwd=scratch, capture_output=True, text=True, timeout=60
                )
                status = Isolation(tuple(json.loads(out.stdout.strip().splitlines()[-1])))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError) as err:
                status = Isolation((), f"the probe failed: {err}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            if cgroup is not None:
                cgroup.remove()
        _STATUS.append(status)
        return status


# --- layers that broke a device here ---------------------------------------------------------
# A PID namespace broke CUDA initialisation on one machine (cudaGetDeviceCount error 304,
# without a fresh /proc). A worker whose set-up fails with a CUDA error inside one is started
# again without it, and so is every later worker of this process for that device.
_BROKEN: dict[str, set[str]] = {}


def broken_layers(device: str | None) -> tuple[str, ...]:
    return tuple(sorted(_BROKEN.get(device or "", set())))


def note_setup_failure(layers: list[str], device: str | None, detail: str) -> None:
    """A worker's trusted set-up failed: if CUDA failed inside a PID namespace, later workers
    for this device go without one."""
    if device == "cuda" and "pidns" in layers and "cuda" in detail.lower():
        _BROKEN.setdefault(device, set()).add("pidns")


def require_isolation(allow_unsandboxed: bool) -> Isolation:
    """The machine's isolation; raises `EvokernelError` when it cannot hold untrusted code and
    the caller did not explicitly allow running without it."""
    from evokernel.errors import EvokernelError

    status = isolation_status()
    if not status.isolated and not allow_unsandboxed:
        raise EvokernelError(
            f"{status.line}: refusing to run untrusted code without an OS sandbox; pass "
            "--allow-unsandboxed (EvalOptions(allow_unsandboxed=True)) to run it anyway"
        )
    return status
