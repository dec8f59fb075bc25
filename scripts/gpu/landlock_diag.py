"""Which Landlock right CUDA initialisation needs on this machine (diagnostic).

`PYTHONPATH=src python3 scripts/gpu/landlock_diag.py`: for each variant a fresh process enters
the Landlock layer alone (the policy's paths, plus the variant's extra rights) and initialises
CUDA; one line per variant. With strace on PATH, the baseline is traced too and the denied
calls are printed.

Found with it on an H100 host (Landlock ABI 7): CUDA initialisation fails (cudaGetDeviceCount
error 304) unless the process has full rights on its own /proc/PID; write-file or truncate
alone there is not enough, and /proc/driver, /proc/sys, /sys, /dev, /tmp do not matter. The
sandbox now grants them (process/confine.py), so "policy" must print ok.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS: dict[str, dict[str, object]] = {
    "policy": {},
    "+all /proc": {"write": ["/proc"]},
    "+all /proc/PID": {"write": ["/proc/PID"]},
    "+all /proc/driver": {"write": ["/proc/driver"]},
    "+all /proc/sys": {"write": ["/proc/sys"]},
    "+write_file /proc": {"wfile": ["/proc"]},
    "+write_file /proc/PID": {"wfile": ["/proc/PID"]},
    "+truncate /proc": {"trunc": ["/proc"]},
}


def child(conf_json: str, variant_json: str) -> None:
    from evokernel.evaluate.process import landlock
    from evokernel.evaluate.process.confine import Confinement, enter

    v = json.loads(variant_json)
    conf = Confinement.from_json(conf_json)
    pid = str(os.getpid())
    for key in ("write", "wfile", "trunc"):
        v[key] = [p.replace("PID", pid) for p in v.get(key, [])]
    conf = type(conf)(
        **{
            **conf.__dict__,
            "read": (*conf.read, *v["wfile"], *v["trunc"]),
            "write": (*conf.write, *v.get("write", [])),
        }
    )
    if v["wfile"] or v["trunc"]:
        real_add = landlock._add
        extra = {p: landlock.WRITE_FILE for p in v["wfile"]}
        extra.update({p: landlock.TRUNCATE for p in v["trunc"]})

        def add(libc, ruleset, path, rights):  # type: ignore[no-untyped-def]
            real_add(libc, ruleset, path, rights | extra.get(path, 0))

        landlock._add = add  # type: ignore[assignment]
    if "scopes" in v:
        landlock._SCOPES = v["scopes"]
    if "net" in v:
        landlock._NET_TCP = v["net"]
    if "version" in v:
        real = landlock.restrict
        landlock.restrict = lambda r, w, d, version=None: real(r, w, d, v["version"])  # type: ignore[assignment]
    out: dict[str, object] = {"layers": enter(conf)}
    try:
        import torch

        torch.ones(4, device="cuda").sum().item()
        out["cuda"] = "ok"
    except Exception as err:
        out["cuda"] = f"FAIL {type(err).__name__}: {str(err)[:120]}"
    print(json.dumps(out), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    from evokernel.evaluate.process import policy

    print("devices:", policy.device_paths())
    for name, variant in VARIANTS.items():
        scratch = Path(tempfile.mkdtemp(prefix="evokernel-lldiag-"))
        for sub in ("tmp", "home"):
            (scratch / sub).mkdir()
        env = policy.child_env(scratch, triton_interpret=None, threads=2, extra=None)
        conf = policy.confinement(str(scratch), env=env, read=(str(Path(__file__).parent),))
        conf = type(conf)(**{**conf.__dict__, "layers": ("landlock",), "uid": None})
        cmd = [sys.executable, __file__, "--child", conf.to_json(), json.dumps(variant)]
        traced = name == "policy" and shutil.which("strace")
        if traced:
            cmd = [
                "strace",
                "-f",
                "-e",
                "trace=%file,ioctl,connect,socket",
                "-o",
                str(scratch / "trace"),
                *cmd,
            ]
        proc = subprocess.run(
            cmd, env=env, cwd=scratch, capture_output=True, text=True, timeout=120
        )
        last = proc.stdout.strip().splitlines()[-1:] or [proc.stderr[-200:]]
        print(f"{name:<28} {last[0]}", flush=True)
        if traced:
            lines = (scratch / "trace").read_text(errors="replace").splitlines()
            bad = [x for x in lines if "EACCES" in x or "EPERM" in x]
            print(f"  strace: {len(bad)} denied calls; first 25:")
            for x in bad[:25]:
                print("   ", x[:200])
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
