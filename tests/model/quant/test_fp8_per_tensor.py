"""Per-tensor FP8 checkpoints (one scale a module): AutoFP8's layout (`weight_scale`,
`input_scale`, `ignored_layers`, no `weight_block_size`) and transformers' (`weight_scale_inv`,
`activation_scale`, `weight_block_size: null`), written by the independent writer in
published.py, with dynamic and static activations. Each loads into FP8 weights that
dequantize to exactly the writer's values; transformers itself reads its own variant as the
same weights; the verify reference dequantizes them by its own path; `verify` passes and
`generate` runs; an FP8 KV cache and broken scales are refused in one line. `quantize
--layout autofp8` writes what AutoFP8's own quantizer would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from published import PARTS, projection, write_fp8_tensor
from safetensors.torch import load_file, save_file

from evokernel import device as devices
from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import verify
from evokernel.errors import CheckpointError
from evokernel.model.loader import load_model
from evokernel.model.quant.packed import Fp8Weight
from evokernel.model.quant.reference import write_dense_copy
from evokernel.ops.registry import OpSet

VARIANTS = {  # name -> (naming, static)
    "autofp8-dynamic": ("autofp8", False),
    "autofp8-static": ("autofp8", True),
    "transformers-dynamic": ("transformers", False),
    "transformers-static": ("transformers", True),
}
PROMPT = [5, 300, 7, 258]


@pytest.fixture(scope="module")
def written(tiny_dir, tmp_path_factory) -> dict[str, tuple[Path, dict[str, torch.Tensor]]]:
    out = {}
    for name, (naming, static) in VARIANTS.items():
        dst = tmp_path_factory.mktemp(name)
        out[name] = (dst, write_fp8_tensor(tiny_dir, dst, naming, static))
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_per_tensor_fp8_loads_as_its_writer_dequantizes(written, name):
    path, ref = written[name]
    cfg, w = load_model(path, dtype=torch.float32)
    assert cfg.quantization is not None and cfg.quantization.method == "fp8"
    label = cfg.quantization.default.label
    assert label == ("fp8-tensor-static" if VARIANTS[name][1] else "fp8-tensor")
    for i in range(cfg.num_hidden_layers):
        for field in PARTS:
            got = getattr(w.layers[i], field)
            assert isinstance(got, Fp8Weight), (field, type(got))
            assert torch.equal(got.dequantize(torch.float32), projection(ref, i, field)), (i, field)
    assert w.lm_head is w.embed_tokens  # tied, and the head in ignored_layers


@pytest.mark.parametrize("name", ["autofp8-static", "transformers-dynamic"])
def test_the_verify_reference_dequantizes_as_the_writer(written, tmp_path, name):
    path, ref = written[name]
    dense = load_file(str(write_dense_copy(path, tmp_path) / "model.safetensors"))
    for prefix, want in ref.items():
        assert torch.equal(dense[f"{prefix}.weight"], want), prefix
    assert not any(k.endswith(("_scale", "_scale_inv")) for k in dense)


@pytest.mark.filterwarnings("ignore::UserWarning")  # transformers: FP8 dequantized on the CPU
@pytest.mark.parametrize("name", ["transformers-dynamic", "transformers-static"])
def test_transformers_reads_its_per_tensor_fp8_as_we_do(written, name):
    """transformers' own FP8 integration (dequantized on a machine without FP8 kernels)
    gives every projection the values our loader gives it."""
    from transformers import AutoModelForCausalLM

    path, _ = written[name]
    theirs = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    _, ours = load_model(path, dtype=torch.float32)
    for i, layer in enumerate(theirs.model.layers):
        for field, parts in PARTS.items():
            blocks = [layer.get_submodule(p).weight.float() for p in parts]
            got = getattr(ours.layers[i], field).dequantize(torch.float32)
            assert torch.allclose(got, torch.cat(blocks), rtol=0, atol=0), (name, i, field)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernels under the interpreter")
@pytest.mark.parametrize("name", ["autofp8-static", "transformers-dynamic"])
def test_per_tensor_fp8_verifies_and_generates(written, name):
    path, _ = written[name]
    devices.prepare("cpu")
    result = verify(path, device="cpu", ops=OpSet.triton(pdl=False), steps=3, prompt=PROMPT)
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8
    assert result.quantization is not None and "fp8-tensor" in result.quantization
    model = load_engine(path, "cpu", None, "torch")
    out = generate(model, [PROMPT], GenerateOptions(max_new_tokens=3)).tokens[0]
    assert len(out) == 3


def _edit_config(path: Path, change) -> None:
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    change(cfg["quantization_config"])
    cfg_path.write_text(json.dumps(cfg))


def _edit_tensors(path: Path, change) -> None:
    f = path / "model.safetensors"
    t = load_file(str(f))
    change(t)
    save_file(t, str(f), metadata={"format": "pt"})


SCALE = "model.layers.0.self_attn.q_proj.weight_scale"
INPUT = "model.layers.0.self_attn.q_proj.input_scale"


def _kv_cache(q: dict) -> None:
    q["kv_cache_scheme"] = "static"


def _bad_scheme(q: dict) -> None:
    q["activation_scheme"] = "tensorwise"


def _scale_of_two(t: dict) -> None:
    t[SCALE] = torch.ones(2)


def _no_input_scale(t: dict) -> None:
    del t[INPUT]


def _nan_scale(t: dict) -> None:
    t[SCALE] = torch.tensor(float("nan"))


def _int_scale(t: dict) -> None:
    t[SCALE] = torch.tensor(3, dtype=torch.int32)


BROKEN = {  # name -> (config edit, tensor edit, what the one line says)
    "fp8 KV cache": (_kv_cache, None, r"kv_cache_scheme \"static\" is not supported"),
    "unknown scheme": (_bad_scheme, None, r"activation_scheme \"tensorwise\" is not supported"),
    "two scales": (None, _scale_of_two, r"weight_scale' has shape \[2\]"),
    "missing input scale": (None, _no_input_scale, r"missing tensor .*input_scale"),
    "NaN scale": (None, _nan_scale, r"weight_scale.*(NaN|finite)"),
    "integer scale": (None, _int_scale, r"weight_scale' has dtype I32"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_per_tensor_fp8_is_refused_in_one_line(tiny_dir, tmp_path, case):
    edit_config, edit_tensors, message = BROKEN[case]
    path = tmp_path / "q"
    write_fp8_tensor(tiny_dir, path, "autofp8", static=True)
    if edit_config is not None:
        _edit_config(path, edit_config)
    if edit_tensors is not None:
        _edit_tensors(path, edit_tensors)
    with pytest.raises(CheckpointError, match=message) as err:
        load_model(path, dtype=torch.float32)
    assert "\n" not in str(err.value)


def test_a_scale_stored_as_one_element_vector_loads(written, tmp_path):
    """Writers store a scalar as [] or [1]: the same value either way."""
    path, ref = written["autofp8-dynamic"]
    copy = tmp_path / "q"
    copy.mkdir()
    for f in path.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    _edit_tensors(copy, lambda t: t.update({SCALE: t[SCALE].reshape(1)}))
    _, w = load_model(copy, dtype=torch.float32)
    want = projection(ref, 0, "qkv_proj")
    assert torch.equal(w.layers[0].qkv_proj.dequantize(torch.float32), want)


def test_model_info_names_per_tensor_fp8(written, capsys):
    from evokernel.cli import main

    path, _ = written["autofp8-static"]
    assert main(["model", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "quantized   fp8 fp8-tensor-static, head dense" in out


@pytest.mark.parametrize("head", ["bf16", "fp8"])
def test_quantize_writes_autofp8_as_its_quantizer_would(tiny_dir, tmp_path, head):
    """Each module: AutoFP8's `per_tensor_quantize` of the source weight, recomputed here step
    for step in the checkpoint's bf16 as AutoFP8 runs it (scale = 448 / amax, weight =
    clamp(w x scale) in e4m3, `weight_scale` = 1 / scale in float32), the config as its
    `save_quantized_model` writes it; the result loads, and a head asked for in FP8 is
    quantized the same way (untied from the embedding)."""
    from evokernel.cli import main

    out = tmp_path / "q"
    argv = ["quantize", "--model", str(tiny_dir), "--out", str(out), "--format", "fp8"]
    assert main([*argv, "--layout", "autofp8", "--head", head]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "ignored_layers": [] if head == "fp8" else ["lm_head"],
    }
    source = load_file(str(tiny_dir / "model.safetensors"))
    written = load_file(str(out / "model.safetensors"))
    modules = [n[: -len(".weight_scale")] for n in written if n.endswith(".weight_scale")]
    assert len(modules) == 7 * 2 + (head == "fp8")
    for m in modules:
        w = source[m + ".weight" if m != "lm_head" else "model.embed_tokens.weight"]
        assert w.dtype == torch.bfloat16
        lo, hi = w.aminmax()
        scale = torch.finfo(torch.float8_e4m3fn).max / torch.maximum(lo.abs(), hi.abs())
        assert torch.equal(written[m + ".weight_scale"], scale.float().reciprocal()), m
        q = (w * scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        assert torch.equal(written[m + ".weight"].view(torch.uint8), q.view(torch.uint8)), m
        assert written[m + ".weight_scale"].shape == ()
    _, weights = load_model(out, dtype=torch.float32)
    assert isinstance(weights.layers[0].qkv_proj, Fp8Weight)
    assert isinstance(weights.lm_head, Fp8Weight) == (head == "fp8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernels under the interpreter")
def test_quantize_as_autofp8_then_verify_against_the_original(tiny_dir, tmp_path):
    from evokernel.model.quant.write import QuantizeOptions, write_quantized

    out = tmp_path / "q"
    write_quantized(tiny_dir, out, QuantizeOptions("fp8", head="fp8", layout="autofp8"))
    devices.prepare("cpu")
    result = verify(
        out, device="cpu", ops=OpSet.triton(pdl=False), steps=3, prompt=PROMPT,
        reference=tiny_dir,
    )  # fmt: skip
    assert result.passed, result.reason
    assert result.quantization is not None and result.quantization.startswith("fp8 fp8-tensor")
