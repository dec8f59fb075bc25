#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src
for spec in int4:gate_up int4:qkv; do
ncu --kernel-name regex:int4_gemv --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  python3 scripts/gpu/quant_profile.py $spec --shape qwen3-8b --dequant cuda 2>&1 | grep -vE "^==PROF==|^\s*$|----" | head -120
done
