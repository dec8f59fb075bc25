"""Quantized checkpoints: the published formats (FP8 block, GPTQ, AWQ), read into packed
weights the quantized kernels run, and written by `evokernel quantize` (docs/quantization.md).

  config.py    `quantization_config` -> `QuantConfig` (per-module `ModuleSpec`)
  layout.py    the tensors each layout stores, with shapes and dtypes (checkpoint checks)
  packed.py    `Fp8Weight`, `Int4Weight`, `Int8Weight`: the kernels' row-major layouts
  convert.py   published tensors -> packed weights (unpacking, act-order, checks)
  load.py      a checked checkpoint -> `ModelWeights` with packed projections
  quantize.py  dense weights -> published tensors (round to nearest)
  write.py     a quantized checkpoint directory from a dense one
  reference.py published tensors -> dense weights by a second path (verify's transformers)
"""
