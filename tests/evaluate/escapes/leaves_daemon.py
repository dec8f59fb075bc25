"""Escape attempt: at import, forks, leaves the session (setsid), forks again and execs a
long `sleep` named MARK (the test makes it unique to find it), then answers correctly.
Expected: `process` (it is still running after the call); it dies with the worker."""

import torch

MARK = "evokernel-mark"
_os = torch.os
_pid = _os.fork()
if _pid == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.execvp("sleep", [MARK, "300"])
    _os._exit(0)
_os.waitpid(_pid, 0)


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


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q, k_cache, v_cache, seq_lens, scale)
