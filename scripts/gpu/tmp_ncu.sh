#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src
M=""
for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected no_instruction lg_throttle dispatch_stall misc branch_resolving tex_throttle; do
  M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
M="${M:1},dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,sm__inst_executed.sum,smsp__inst_executed.avg.per_cycle_active,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_pipe_tensor.sum"
for spec in ${SPECS:-int4:gate_up int4:down}; do
echo "== $spec"
ncu --kernel-name regex:int4_gemv --launch-skip 3 --launch-count 1 --metrics $M \
  python3 scripts/gpu/quant_profile.py $spec --shape qwen3-8b --dequant cuda 2>&1 | grep -E "^\s+(smsp|dram|lts|sm__|gpu__|l1tex)" | awk '{print $1, $NF}'
done
