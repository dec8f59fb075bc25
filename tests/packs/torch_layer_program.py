"""A correct `decode_layer` program made of the torch reference ops (so the engine's tokens
do not change), counting its calls by context bound in CALLS. It returns a new tensor (h is
left as it was). Read as text by the pack tests and the decode_layer op tests."""

from evokernel.ops import reference as R

CALLS = []


def decode_layer(
    h,
    *,
    input_norm,
    qkv_proj,
    o_proj,
    post_attn_norm,
    gate_up_proj,
    down_proj,
    qkv_bias,
    q_norm,
    k_norm,
    cos,
    sin,
    positions,
    k_cache,
    v_cache,
    seq_lens,
    scale,
    eps,
    max_len,
):
    CALLS.append(int(max_len))
    B = h.shape[0]
    qkv = R.linear(R.rms_norm(h, input_norm, eps), qkv_proj, qkv_bias)
    q = R.qk_norm_rope_append(
        qkv.view(B, 1, -1), q_norm, k_norm, cos, sin, positions.view(B, 1), k_cache, v_cache, eps
    )
    n = min(max_len, k_cache.shape[2])
    attn = R.decode_attention(
        q.view(B, -1, q.shape[-1]), k_cache[:, :, :n], v_cache[:, :, :n], seq_lens, scale
    ).reshape(B, -1)
    h = h + R.linear(attn, o_proj)
    act = R.silu_mul(R.linear(R.rms_norm(h, post_attn_norm, eps), gate_up_proj))
    return h + R.linear(act, down_proj)
