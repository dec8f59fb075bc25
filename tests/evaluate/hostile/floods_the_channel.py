"""Hostile: writes a reply onto the private channel that declares 64 GiB of tensors, to be
sent from one reused buffer, so that the parent would hold far more memory than the worker
ever had. Expected: no-result, refused from the declaration before any frame is read."""

import torch


# EVOLVE-BLOCK-START
def _flood():
    _os = torch.os
    json = _os.sys.modules["json"]
    fd = int(_os.sys.argv[1])
    metas = [{"dtype": "uint8", "shape": [1 << 30]}] * 64
    records = [{"step": "same", "mutated": [], "out": {"__tensor__": i}} for i in range(64)]
    body = {"op": "checked", "records": records, "problems": []}
    frame = json.dumps({"body": body, "tensors": metas}).encode()
    _os.write(fd, len(frame).to_bytes(4, "big") + frame)
    chunk = bytes(1 << 20)
    _os.write(fd, (1 << 30).to_bytes(4, "big"))
    for _ in range(1024):  # blocks once the parent stops reading
        _os.write(fd, chunk)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _flood()
    return q
