"""`evokernel tune`: search every engine task at a checkpoint's shapes on this GPU and write
a kernel pack (the format and the engine's side: evokernel.engine.packs).

    pack = write_pack([run_dir], cfg, out_dir, device)      # from finished runs (write.py)

Modules: search.py (`tune`: one resumable search per engine task, then the pack), write.py
(the dispatch rule, writing and signing a pack from run directories), confirm.py (each
programmed bucket kept only where the whole decode step, timed against the plain engine, is
faster).
"""
