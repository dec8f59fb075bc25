"""Kernel packs, as the engine runs them: the programs a search chose for one checkpoint's
family and shapes on one GPU model (`evokernel tune` writes them: evokernel.tune).

    PACK_DIR/pack.json        format, created, tool version; the device (GPU name, capability,
                              driver), torch/Triton/CUDA versions; the model's family and shape
                              key; per task the dispatch table: context bounds -> program or
                              "baseline", each with its measured speedup and 95% interval; the
                              programs' content hashes, signed with the tuning user's pack key
    PACK_DIR/programs/*.py    the chosen programs (each defines its task's entry point)
    PACK_DIR/runs/<task>/     the searches `evokernel tune` ran (resumable run directories)

    pack = open_pack(pack_dir, cfg, device, dtype, layer)   # fit, trust, static check, import,
                                                            # self-check, or PackError (use.py)
    ops = packed_ops(OpSet.triton(), pack)                  # decode_layer per context bucket
    model = load_engine(dir, device, kernels=pack_dir)      # the same, for the CLI

Modules: format.py (the file format, device and shape keys), load.py (reading and refusing
what does not fit), trust.py (content hashes, this user's key, who may run a pack's code),
programs.py (importing a program: hash, static check, guarded import), selfcheck.py (each
program beside the engine's layer before the first step), use.py (`open_pack`: all of that,
the one way an engine takes a pack), dispatch.py (the op that picks a program per call). The
format and the dispatch rule are in docs/layer-task.md, the trust model and the self-check in
docs/packs.md.
"""
