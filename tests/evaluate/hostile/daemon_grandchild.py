"""Hostile: double-forks a daemon that leaves the session (pid to EVOKERNEL_TEST_PIDFILE),
then answers correctly. Expected: process; the daemon is killed with the worker."""

import os
import time

import torch


# EVOLVE-BLOCK-START
def _attend(q, k_cache, v_cache, seq_lens, scale):
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    group = Hq // Hkv
    out = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        k = k_cache[b, :, :n].float()  # [Hkv, n, D]
        v = v_cache[b, :, :n].float()
        qb = q[b].float().view(Hkv, group, D)  # query head h reads kv head h // group
        s = torch.einsum("kgd,knd->kgn", qb, k) * scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("kgn,knd->kgd", p, v).reshape(Hq, D).to(q.dtype)
    return out


STARTED = []


def _daemon():
    if STARTED:
        return
    STARTED.append(True)
    path = os.environ.get("EVOKERNEL_TEST_PIDFILE")
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            if path:
                with open(path, "a") as f:
                    f.write(f"{os.getpid()}\n")
            time.sleep(300)
        os._exit(0)
    os.waitpid(pid, 0)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _daemon()
    return _attend(q, k_cache, v_cache, seq_lens, scale)
