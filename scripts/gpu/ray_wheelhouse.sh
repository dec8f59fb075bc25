#!/usr/bin/env bash
# Build a wheelhouse of Ray and its dependencies for a GPU machine without network, small enough
# to carry (the Ray wheel's Java jar, unused by Python, is removed: 79 -> 47 MB).
#
#   scripts/gpu/ray_wheelhouse.sh [DIR] [PYVER]      (on a machine with PyPI access)
#       DIR    where the wheels go (default ./ray-wheels)
#       PYVER  the GPU machine's CPython, e.g. 3.12 (default 3.12)
#
# Then, on the GPU machine, from the repository root (no network, nothing installed system-wide):
#
#   python3 -m pip install --no-index --find-links ray-wheels --target /tmp/raylib ray
#   export PYTHONPATH=$PWD/src:/tmp/raylib
#
# The wheels are manylinux2014 x86_64 binaries for that CPython; pure-Python dependencies are
# universal. The script fails when the total passes 60 MB.
set -euo pipefail
dir=${1:-ray-wheels}
pyver=${2:-3.12}
tag=cp${pyver/./}
py=${PYTHON:-python3}
mkdir -p "$dir"
"$py" -m pip download -q --only-binary=:all: --python-version "$pyver" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --implementation cp --abi "$tag" --abi abi3 --abi none -d "$dir" ray
wheel=$(ls "$dir"/ray-*-"$tag"-"$tag"-*.whl)
"$py" - "$wheel" <<'EOF'
"""Drop ray/jars/ (the Java worker) from the wheel and rewrite its RECORD to match."""
import os
import sys
import zipfile

path = sys.argv[1]
tmp = path + ".tmp"
with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        name = info.filename
        if name.startswith("ray/jars/"):
            continue
        data = src.read(name)
        if name.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if not line.startswith("ray/jars/")).encode()
        dst.writestr(info, data)
os.replace(tmp, path)
EOF
total=$(du -cb "$dir"/*.whl | tail -1 | cut -f1)
ls -la "$dir"
echo "wheelhouse $dir: $((total / 1000000)) MB for CPython $pyver"
[ "$total" -le 60000000 ] || { echo "over 60 MB"; exit 1; }
