"""Hostile: writes a forged, malformed reply frame straight onto the private channel (its file
descriptor is the worker's first argument), then waits. Expected: no-result, saying what was
wrong with the message ("protocol broken: ... must be a list")."""

import torch


# EVOLVE-BLOCK-START
def _forge():
    _os = torch.os
    json = _os.sys.modules["json"]
    fd = int(_os.sys.argv[1])
    body = {"op": "checked", "records": "all good", "problems": []}
    frame = json.dumps({"body": body, "tensors": []}).encode()
    _os.write(fd, len(frame).to_bytes(4, "big") + frame)
    _os.sys.modules["time"].sleep(30)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _forge()
    return q
