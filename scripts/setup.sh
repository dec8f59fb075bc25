#!/usr/bin/env bash
# Create or refresh ./.venv with evokernel installed (editable).
#   scripts/setup.sh          runtime + the HF reference (extra "ref")
#   scripts/setup.sh test     also the test and lint tools (extra "test"), and Chromium for
#                             the report's browser tests (apt-get, when root)
# On a machine without a CUDA GPU, torch/triton/numpy/transformers are pinned by
# constraints/cpu.txt so pip takes the CPU torch wheel instead of several GB of CUDA wheels.
# On a CUDA machine the venv sees the system's site-packages, so the torch and triton that
# came with the machine's CUDA stack are used as they are (set EVOKERNEL_CPU=1 to force CPU pins).
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-ref}
py=${PYTHON:-python3}

gpu=0
if [ -z "${EVOKERNEL_CPU:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
fi

# The report tests drive a real Chromium (Debian's package) through Playwright: install it
# where apt and root are at hand; elsewhere those tests skip and say why.
if [ "$extra" = test ] && [ -z "${EVOKERNEL_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium for the browser tests (apt-get)"
    apt_install() {
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 chromium fonts-dejavu-core >/dev/null
    }
    apt_install || { apt-get update -q >/dev/null && apt_install; } \
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

if [ ! -x .venv/bin/python ]; then
  if [ "$gpu" = 1 ]; then
    echo "setup: CUDA GPU found; the venv uses the system torch/triton (--system-site-packages)"
    "$py" -m venv --system-site-packages .venv
  else
    "$py" -m venv .venv
  fi
fi

echo "setup: installing evokernel[$extra] into .venv (first run takes a few minutes)"
if [ "$gpu" = 1 ]; then
  .venv/bin/python -m pip install -q -e ".[$extra]"
else
  .venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[$extra]"
fi
echo "$stamp" > .venv/.evokernel-stamp
