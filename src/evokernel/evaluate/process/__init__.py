"""Process control: everything between the evaluator and the processes that run candidate code.

  policy    what a worker may read, write and know (paths, environment, uid), the machine's
            isolation status, redaction of text coming back
  confine   the child's half: enters the sandbox before anything else runs
  landlock, seccomp, cgroup   the kernel mechanisms, through ctypes and /sys/fs/cgroup
  probe     a bare sandboxed process that reports the layers it got

This package imports only the standard library at import time: a worker enters its sandbox
before torch (and its threads) exist.
"""
