"""Hostile: double-forks a daemon that leaves the session (a `sleep` named MARK, which a test
makes unique to find it), then answers correctly. Expected: process; the daemon is killed with
the worker."""

import os

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
MARK = "evokernel-mark"


def _daemon():
    if STARTED:
        return
    STARTED.append(True)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", [MARK, "300"])
        os._exit(0)
    os.waitpid(pid, 0)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _daemon()
    return _attend(q, k_cache, v_cache, seq_lens, scale)
