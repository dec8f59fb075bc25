"""evokernel: Qwen3 decode at the memory-bandwidth limit, and verified evolutionary search
for the kernels that get it there.

Data flow (one folder per stage):
  model/     HF checkpoint dir -> ModelConfig + device weights
  engine/    weights -> static KV cache, Qwen3 step, sampling, generate, verify vs transformers
  ops/       op name -> implementation (torch reference, Triton launcher, evolved candidate)
  kernels/   @triton.jit bodies only
  tasks/     kernel tasks: interface, reference, inputs, scenarios, roofline, seed candidates
  evaluate/  candidate -> isolated process -> correctness + paired timing -> EvalResult
  evolve/    database (islands, MAP-Elites) -> mutators (offline, LLM) -> candidates -> evaluate
  bench/     decode throughput vs baselines, bandwidth floor
  cli/       one module per verb: parse, call, print
"""

__version__ = "0.1.0"
