"""The worker: the process that runs candidate code (everything in this package runs next to it,
inside the sandbox, and is trusted only until the candidate is imported).

  __main__  `python -m evokernel.evaluate.worker FD CONFINEMENT`: enter the sandbox, serve
  serve     the request loop: trusted set-up, then load / check / prepare / time / profile
  calls     calling candidate code under the guards; one correctness job
  timing    the timed phase of one scenario; copy bandwidth; GPU spin rate
  profile   the profiler pass (CUDA)
  guards    tamper checks (patched functions, threads, streams)
  warmup    trusted warm-up before the guards' snapshot
  tritoncache  Triton's cache: the private directory, then the read-only shared one

The worker reports raw facts (outputs, per-call times, what only it can see); every verdict is
made in the parent. Its messages are `evaluate.protocol` dataclasses.
"""
