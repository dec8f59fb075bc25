#!/usr/bin/env bash
# Create or refresh ./.venv so that `evokernel` (and `python -m evokernel`) runs this tree.
#   scripts/setup.sh          runtime + the HF reference (extra "ref")
#   scripts/setup.sh test     also the test and lint tools (extra "test"), and Chromium for
#                             the report's browser tests (apt-get, when root)
#
# Contract:
#   * Idempotent: a stamp in .venv (pyproject.toml, constraints/cpu.txt, extra, GPU or not)
#     makes a second run a no-op.
#   * Without a CUDA GPU (or with EVOKERNEL_CPU=1) the venv is self-contained and
#     torch/triton/numpy/transformers are pinned by constraints/cpu.txt, so pip takes the CPU
#     torch wheel instead of several GB of CUDA wheels.
#   * With a CUDA GPU the venv sees the interpreter's packages (--system-site-packages; when
#     $PYTHON is itself a venv, that venv's site-packages too), so the torch and triton that
#     came with the machine's CUDA stack are used as they are.
#   * When every requirement of pyproject.toml (dependencies + the extra, and on the CPU the
#     pins) is already installed, the network is not used at all: evokernel itself goes in
#     with `pip install --no-index --no-build-isolation --no-deps -e .` when the build backend
#     (setuptools) is importable, else as a .pth file putting src/ on sys.path plus a small
#     .venv/bin/evokernel wrapper. Otherwise pip installs what is missing from the index.
#   * A failure ends with one line saying what is missing and how to get it; pip's own output
#     is in .venv/setup-pip.log. While pip (or apt-get) works quietly, a line every 20 s says
#     so, with the time spent and the log's last line.
# Environment: PYTHON (interpreter to build the venv from, default python3), EVOKERNEL_CPU=1.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-ref}
py=${PYTHON:-python3}
log=.venv/setup-pip.log

die() {
  echo "setup: error: $*" >&2
  exit 1
}

# ticking LABEL CMD...: run CMD in the foreground (Ctrl-C reaches it) with a line every
# ${EVOKERNEL_TICK_S:-20} s saying LABEL and the time spent (pip is silent for minutes);
# returns CMD's status. The lines go to fd 3, the script's stdout, even where CMD's output is
# redirected to the log. (run.sh has the same helper.)
exec 3>&1
ticker=
stop_ticker() {
  if [ -n "$ticker" ]; then
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    ticker=
  fi
}
ticking() {
  local label=$1 start rc=0
  shift
  start=$(date +%s)
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM # its sleep goes with it
    while :; do
      sleep "${EVOKERNEL_TICK_S:-20}" &
      nap=$!
      wait "$nap"
      last=$(tail -n 1 "$log" 2>/dev/null | cut -c1-100 || true)
      echo "$label ($(($(date +%s) - start)) s)${last:+; pip: $last}" >&3
    done
  ) &
  ticker=$!
  trap stop_ticker EXIT
  "$@" || rc=$?
  stop_ticker
  return "$rc"
}

gpu=0
if [ -z "${EVOKERNEL_CPU:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
fi
constraints=
[ "$gpu" = 0 ] && constraints=constraints/cpu.txt

# The report tests drive a real Chromium (Debian's package) through Playwright: install it
# where apt and root are at hand; elsewhere those tests skip and say why.
if [ "$extra" = test ] && [ -z "${EVOKERNEL_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium for the browser tests (apt-get)"
    apt_install() {
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 chromium fonts-dejavu-core >/dev/null 2>&1
    }
    ticking "setup: still installing chromium" apt_install \
      || { apt-get update -q >/dev/null 2>&1 && ticking "setup: still installing chromium" apt_install; } \
      || echo "setup: chromium could not be installed; the browser tests will skip"
  else
    echo "setup: no chromium, and no root apt-get to install it; the browser tests will skip"
  fi
fi

stamp_src="$(cat pyproject.toml constraints/cpu.txt) extra=$extra gpu=$gpu"
stamp=$(printf '%s' "$stamp_src" | sha256sum | cut -c1-16)
if [ -f .venv/.evokernel-stamp ] && [ "$(cat .venv/.evokernel-stamp)" = "$stamp" ]; then
  exit 0
fi

# --- the venv ------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  command -v "$py" >/dev/null 2>&1 || die "no Python interpreter '$py'; install Python 3.10+ or set PYTHON=/path/to/python3"
  venv_args=()
  if [ "$gpu" = 1 ]; then
    echo "setup: CUDA GPU found; the venv uses the system torch/triton (--system-site-packages)"
    venv_args=(--system-site-packages)
  fi
  if ! err=$("$py" -m venv "${venv_args[@]}" .venv 2>&1); then
    rm -rf .venv
    last=$(printf '%s\n' "$err" | grep -v '^\s*$' | tail -n 1 || true)
    die "'$py -m venv' failed${last:+ ($last)}; install the venv module" \
      "(Debian/Ubuntu: apt-get install python3-venv) or set PYTHON=/path/to/python3"
  fi
fi

# --system-site-packages only reaches the *base* interpreter's packages. When $py is itself a
# venv (e.g. a machine image whose torch lives in /opt/.../.venv), add that venv's site-packages
# too, through a .pth file that `site` reads at start-up. Its name sorts after the venv's own
# .pth files (`__editable__...`, evokernel-src.pth), so this tree's evokernel comes first.
pyver() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
site_dirs() { # purelib, then platlib when it differs
  "$1" -c 'import sysconfig; p = sysconfig.get_paths(); print(*dict.fromkeys([p["purelib"], p["platlib"]]), sep="\n")'
}
if [ "$gpu" = 1 ] && "$py" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null &&
  [ "$(pyver "$py")" = "$(pyver .venv/bin/python)" ]; then
  {
    echo "# written by scripts/setup.sh: the packages of the venv .venv was built from" \
      "($("$py" -c 'import sys; print(sys.executable)'))"
    site_dirs "$py" | while read -r dir; do echo "import site; site.addsitedir('$dir')"; done
  } >"$(site_dirs .venv/bin/python | head -n 1)/zz-evokernel-parent-venv.pth"
fi

# --- what is missing -----------------------------------------------------------------------
# unmet deps|backend: prints, one a line, the requirements of pyproject.toml (runtime
# dependencies + the extra, or [build-system] requires) that .venv's python does not have at
# a fitting version (on the CPU also checked against constraints/cpu.txt). Exits non-zero
# when it cannot tell (no TOML or requirement parser at hand).
unmet() {
  .venv/bin/python - "$1" "$extra" "$constraints" <<'PY'
import re
import sys
from importlib import metadata

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        from pip._vendor import tomli as tomllib
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

what, extra, constraints = sys.argv[1:4]
with open("pyproject.toml", "rb") as f:
    meta = tomllib.load(f)
if what == "backend":
    reqs = meta["build-system"]["requires"]
else:
    project = meta["project"]
    reqs = project["dependencies"] + project.get("optional-dependencies", {}).get(extra, [])


def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()


pins = {}
if constraints:
    for line in open(constraints):
        line = line.split("#")[0].strip()
        if line:
            pin = Requirement(line)
            pins[key(pin.name)] = pin
for text in dict.fromkeys(reqs):
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({"extra": extra}):
        continue
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        have = None
    pin = pins.get(key(req.name))
    if have is None or not all(
        r.specifier.contains(have, prereleases=True) for r in (req, pin) if r is not None
    ):
        print(str(pin or req) + (f" (found {have})" if have else ""))
PY
}

# --- install ---------------------------------------------------------------------------------
venv_site=$(site_dirs .venv/bin/python | head -n 1)
# Undo the source-tree fallback below before pip installs evokernel for real.
drop_src_fallback() {
  rm -f "$venv_site/evokernel-src.pth"
  if [ -f .venv/bin/.evokernel-wrapper ]; then rm -f .venv/bin/evokernel .venv/bin/.evokernel-wrapper; fi
}

: >"$log"
if missing=$(unmet deps 2>>"$log") && [ -z "$missing" ]; then
  # Every dependency is there: install only evokernel itself, with no index and no build
  # isolation (which would fetch setuptools from the index).
  echo "setup: dependencies of evokernel[$extra] already installed; installing evokernel from this tree (no network)"
  backend=$(unmet backend 2>>"$log") || backend="(could not check)"
  drop_src_fallback
  if [ -n "$backend" ]; then
    why="no build backend in the venv: $backend"
  elif ! ticking "setup: still installing evokernel" .venv/bin/python -m pip install -q \
    --no-index --no-build-isolation --no-deps -e . >>"$log" 2>&1; then
    why="pip could not install it offline, see $log"
  else
    why=
  fi
  if [ -n "$why" ]; then
    # Run from the source tree instead: a .pth file puts src/ on sys.path (so
    # `python -m evokernel` works) and a wrapper stands in for the console script.
    echo "setup: $why; using src/ in place instead (evokernel-src.pth)"
    .venv/bin/python -m pip uninstall -q -y evokernel >>"$log" 2>&1 || true
    echo "$PWD/src" >"$venv_site/evokernel-src.pth"
    cat >.venv/bin/evokernel <<'SH'
#!/bin/sh
# written by scripts/setup.sh: stands in for the console script (src/ is on sys.path via a .pth)
exec "$(dirname "$0")/python" -m evokernel "$@"
SH
    chmod +x .venv/bin/evokernel
    touch .venv/bin/.evokernel-wrapper
  fi
else
  # Something is missing (or could not be checked): pip installs it from the package index.
  echo "setup: installing evokernel[$extra] into .venv (first run takes a few minutes)"
  drop_src_fallback
  pip_args=(-e ".[$extra]")
  [ -n "$constraints" ] && pip_args=(-c "$constraints" "${pip_args[@]}")
  if ! ticking "setup: still installing (downloads and builds)" \
    .venv/bin/python -m pip install "${pip_args[@]}" >>"$log" 2>&1; then
    # One line: pip's first error, what is missing, and the command that would install it.
    reason=$(grep -m 1 -E '^\s*ERROR: ' "$log" | sed -E 's/^\s*ERROR: //' || true)
    specs=$(printf '%s\n' "$missing" | sed -E "s/ \(found .*\)$//; /^$/d; s/.*/'&'/" | paste -sd ' ' -)
    if [ -z "$specs" ]; then
      how="re-run where a package index is reachable"
    elif [ -n "$constraints" ]; then
      how="re-run where a package index is reachable, or install them first: .venv/bin/python -m pip install -c $constraints $specs"
    else # CUDA machine: the venv takes them from the interpreter it was built from
      how="install them for $py ($py -m pip install $specs), then re-run"
    fi
    listed=$(printf '%s\n' "$missing" | sed '/^$/d' | paste -sd ';' - | sed 's/;/, /g')
    die "cannot install evokernel[$extra]: ${listed:+missing $listed; }pip failed (${reason:-see $log})." \
      "To fix: $how (pip's output: $log)"
  fi
fi
echo "$stamp" >.venv/.evokernel-stamp
