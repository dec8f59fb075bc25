"""compressed-tensors checkpoints (llm-compressor's format), written by the compressed-tensors
library itself (compressed.py): pack-quantized int4 / int8 (groups, one group a row, zero
points, act-order groups) and FP8 per channel, per tensor and per block, with and without
dynamic activation quantization. Each loads into packed weights that dequantize to exactly
the library's own quantize-dequantize of the weights, the verify reference's independent
dequantization (model/quant/reference.py) gives the same values, `verify` passes against
transformers and `generate` runs; what the kernels do not run is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("compressed_tensors")

from compressed import write_compressed
from published import PARTS, projection

from evokernel import device as devices
from evokernel.engine.generate import GenerateOptions, generate
from evokernel.engine.loading import load_engine
from evokernel.engine.verify import verify
from evokernel.errors import CheckpointError
from evokernel.model.loader import load_model
from evokernel.model.quant.packed import Fp8Weight, IntWeight
from evokernel.model.quant.reference import write_dense_copy
from evokernel.model.quant.write import QuantizeOptions, write_quantized
from evokernel.model.random import write_random_checkpoint
from evokernel.ops.registry import OpSet

INT = {"type": "int", "symmetric": True}
FP8 = {"num_bits": 8, "type": "float", "symmetric": True}
TOKEN_FP8 = {**FP8, "strategy": "token", "dynamic": True}
TOKEN_INT8 = {**INT, "num_bits": 8, "strategy": "token", "dynamic": True}
SCHEMES = {  # name -> write_compressed's keywords
    "w4a16-g32": {"weights": {**INT, "num_bits": 4, "strategy": "group", "group_size": 32}},
    "w4a16-g32-asym": {
        "weights": {**INT, "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": False}
    },
    "w8a16-channel": {"weights": {**INT, "num_bits": 8, "strategy": "channel"}},
    "w8a16-g64-asym": {
        "weights": {**INT, "num_bits": 8, "strategy": "group", "group_size": 64, "symmetric": False}
    },
    "w8a8-channel": {  # int-quantized: int8 weights as int8, activations dynamic
        "weights": {**INT, "num_bits": 8, "strategy": "channel"},
        "activations": TOKEN_INT8,
    },
    "w8a8-g32-asym": {
        "weights": {
            **INT,
            "num_bits": 8,
            "strategy": "group",
            "group_size": 32,
            "symmetric": False,
        },
        "activations": TOKEN_INT8,
    },
    "fp8-channel-dynamic": {"weights": {**FP8, "strategy": "channel"}, "activations": TOKEN_FP8},
    "fp8-tensor": {"weights": {**FP8, "strategy": "tensor"}},
    "fp8-block": {"weights": {**FP8, "strategy": "block", "block_structure": [16, 32]}},
}
PROMPT = [5, 300, 7, 258, 1, 77]


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("src"), "tiny", seed=6, dtype="float32")


@pytest.fixture(scope="module")
def written(src, tmp_path_factory) -> dict[str, tuple[Path, dict[str, torch.Tensor]]]:
    out = {}
    for name, kw in SCHEMES.items():
        dst = tmp_path_factory.mktemp(name)
        # the library's own choice but for int weights alone (pack-quantized either way)
        fmt = "pack-quantized" if name.startswith("w") and "a16" in name else None
        out[name] = (dst, write_compressed(src, dst, fmt=fmt, **kw))
    return out


@pytest.mark.parametrize("name", SCHEMES)
def test_a_compressed_tensors_checkpoint_loads_as_the_library_dequantizes(written, name):
    path, ref = written[name]
    cfg, w = load_model(path, dtype=torch.float32)
    assert cfg.quantization is not None and cfg.quantization.method == "compressed-tensors"
    kind = IntWeight if SCHEMES[name]["weights"]["type"] == "int" else Fp8Weight
    for i in range(cfg.num_hidden_layers):
        for field in PARTS:
            got = getattr(w.layers[i], field)
            assert isinstance(got, kind), (field, type(got))
            assert torch.equal(got.dequantize(torch.float32), projection(ref, i, field)), (name, i)
    assert w.lm_head is w.embed_tokens  # tied, and `ignore: [lm_head]`
    if name.startswith("w"):
        assert (w.layers[0].qkv_proj.zeros is None) == ("asym" not in name)


@pytest.mark.parametrize(
    "name", ["w4a16-g32-asym", "w8a16-channel", "w8a8-g32-asym", "fp8-channel-dynamic", "fp8-block"]
)
def test_the_verify_reference_dequantizes_as_the_library(written, tmp_path, name):
    """model/quant/reference.py reads the published tensors by its own path (no code shared
    with the loader) and gets the library's values."""
    path, ref = written[name]
    out = write_dense_copy(path, tmp_path)
    dense = load_file(str(out / "model.safetensors"))
    for prefix, want in ref.items():
        assert torch.equal(dense[f"{prefix}.weight"], want), prefix
    assert "quantization_config" not in json.loads((out / "config.json").read_text())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernels under the interpreter")
@pytest.mark.parametrize("name", ["w4a16-g32-asym", "w8a8-channel", "fp8-channel-dynamic"])
def test_a_compressed_tensors_checkpoint_verifies_and_generates(written, name):
    path, _ = written[name]
    devices.prepare("cpu")
    result = verify(path, device="cpu", ops=OpSet.triton(pdl=False), steps=3, prompt=PROMPT[:4])
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8
    assert result.quantization is not None and result.quantization.startswith("compressed-tensors")
    model = load_engine(path, "cpu", None, "torch")
    out = generate(model, [PROMPT], GenerateOptions(max_new_tokens=3)).tokens[0]
    assert len(out) == 3


def test_targets_and_ignore_choose_the_quantized_modules(src, tmp_path):
    """`ignore` with a pattern leaves the MLP dense; the attention is packed."""
    kw = SCHEMES["w4a16-g32"]
    write_compressed(src, tmp_path / "q", ignore=("lm_head", "re:.*mlp\\..*"), **kw)
    _, w = load_model(tmp_path / "q", dtype=torch.float32)
    assert isinstance(w.layers[0].qkv_proj, IntWeight)
    assert isinstance(w.layers[0].o_proj, IntWeight)
    assert isinstance(w.layers[0].gate_up_proj, torch.Tensor)
    assert isinstance(w.layers[1].down_proj, torch.Tensor)


def _edit(path: Path, change) -> None:
    cfg = json.loads((path / "config.json").read_text())
    change(cfg["quantization_config"])
    (path / "config.json").write_text(json.dumps(cfg))


def _group(q):
    return q["config_groups"]["group_0"]


REFUSED = {
    "status": (lambda q: q.update(quantization_status="frozen"),
               'quantization_status "frozen" is not supported'),
    "nvfp4": (lambda q: _group(q).update(format="nvfp4-pack-quantized"),
              'format "nvfp4-pack-quantized" is not supported'),
    "kv-cache": (lambda q: q.update(kv_cache_scheme={"num_bits": 8}),
                 "kv_cache_scheme is not supported"),
    "static-acts": (lambda q: _group(q).update(input_activations={**TOKEN_FP8, "dynamic": False}),
                    "input_activations.dynamic false is not supported"),
    "acts-on-ints": (lambda q: _group(q).update(input_activations=TOKEN_FP8),
                     "input_activations is not supported with pack-quantized"),
    "3-bit": (lambda q: _group(q)["weights"].update(num_bits=3), "weights.num_bits 3 is not"),
    "class-target": (lambda q: _group(q).update(targets=["Qwen3DecoderLayer"]),
                     'targets "Qwen3DecoderLayer" is not supported'),
    "tensor-int": (lambda q: _group(q)["weights"].update(strategy="tensor"),
                   'weights.strategy "tensor" is not supported'),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_what_the_kernels_do_not_run_is_refused_in_one_line(written, tmp_path, case):
    import shutil

    path = tmp_path / "q"
    source = "fp8-channel-dynamic" if case == "static-acts" else "w4a16-g32"
    shutil.copytree(written[source][0], path)
    change, message = REFUSED[case]
    _edit(path, change)
    with pytest.raises(CheckpointError, match=message) as err:
        load_model(path, dtype=torch.float32)
    assert "\n" not in str(err.value)


def test_a_weight_shape_that_disagrees_with_the_config_is_refused(written, tmp_path):
    import shutil

    path = tmp_path / "q"
    shutil.copytree(written["w4a16-g32"][0], path)
    tensors = load_file(str(path / "model.safetensors"))
    tensors["model.layers.1.mlp.down_proj.weight_shape"] = torch.tensor([64, 184])
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"down_proj.weight_shape' holds \[64, 184\]"):
        load_model(path, dtype=torch.float32)


def test_act_order_groups_load_through_the_weight_g_idx(written, tmp_path):
    """`actorder: group` (compressed-tensors before 0.20 wrote it): a column's group is
    `weight_g_idx[k]`, its columns in input order. Built from a library-written checkpoint
    by the library's own unpack and pack: each module's columns permuted, the g_idx naming
    each column's original group (one permutation for the modules that share an input, as
    GPTQ's activation order is), so the module stands for the reference's columns in the
    permuted order."""
    import shutil

    from compressed_tensors.compressors.pack_quantized.helpers import (
        pack_to_int32,
        unpack_from_int32,
    )

    path = tmp_path / "q"
    base, ref = written["w4a16-g32-asym"]
    shutil.copytree(base, path)
    tensors = load_file(str(path / "model.safetensors"))
    order: dict[str, torch.Tensor] = {}
    inputs = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # share a permutation
    for prefix in ref:
        N, K = (int(v) for v in tensors[f"{prefix}.weight_shape"])
        seed = K + sum(prefix.endswith(n) for n in inputs)  # one per input a layer
        perm = torch.randperm(K, generator=torch.Generator().manual_seed(seed))
        q = unpack_from_int32(tensors[f"{prefix}.weight_packed"], 4, torch.Size([N, K]))
        tensors[f"{prefix}.weight_packed"] = pack_to_int32(q[:, perm].contiguous(), 4)
        tensors[f"{prefix}.weight_g_idx"] = (perm // 32).to(torch.int32)
        order[prefix] = perm
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    _edit(path, lambda q: _group(q)["weights"].update(actorder="group"))
    _, w = load_model(path, dtype=torch.float32)
    for field, parts in PARTS.items():
        got = getattr(w.layers[0], field)
        assert isinstance(got, IntWeight) and got.perm is not None
        want = torch.cat(
            [ref[f"model.layers.0.{p}"][:, order[f"model.layers.0.{p}"]] for p in parts]
        )
        assert torch.equal(got.dequantize(torch.float32), want), field
    (tmp_path / "dense").mkdir()
    dense = load_file(str(write_dense_copy(path, tmp_path / "dense") / "model.safetensors"))
    for prefix, perm in order.items():
        assert torch.equal(dense[f"{prefix}.weight"], ref[prefix][:, perm]), prefix


def test_model_info_names_the_quantization(src, written, capsys):
    """...and counts the parameters of the model it stands for, not its packed words."""
    from evokernel.cli import main

    assert main(["model", "info", str(written["w4a16-g32-asym"][0])]) == 0
    assert "quantized   compressed-tensors int4-g32-asym, head dense" in capsys.readouterr().out
    infos = []
    for path in (written["fp8-channel-dynamic"][0], written["w4a16-g32"][0], src):
        assert main(["model", "info", str(path), "--json"]) == 0
        infos.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    labels = [i["quantization"] for i in infos]
    assert labels == ["compressed-tensors fp8-channel, head dense",
                      "compressed-tensors int4-g32, head dense", None]  # fmt: skip
    assert len({i["num_parameters"] for i in infos}) == 1


def test_each_module_takes_the_group_the_library_gives_it(src):
    """Several groups and `ignore`: the most specific target wins (an exact name, then a
    pattern, then Linear), as compressed-tensors' own `apply_quantization_config` decides on
    transformers' model of the same checkpoint."""
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    from transformers import AutoModelForCausalLM

    from evokernel.model.quant.config import parse_quantization

    w4 = {**INT, "num_bits": 4, "strategy": "group", "group_size": 32}
    w8 = {**INT, "num_bits": 8, "strategy": "channel"}
    raw = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "a": {"targets": ["Linear"], "weights": w4},
            "b": {"targets": ["re:.*mlp\\..*", "model.layers.0.self_attn.o_proj"], "weights": w8},
            "c": {"targets": ["re:.*down_proj"], "weights": {**w4, "group_size": 64}},
        },
        "ignore": ["lm_head", "re:model\\.layers\\.1\\.self_attn\\.[qkv]_proj"],
    }
    ours = parse_quantization(raw, "config.json")
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    apply_quantization_config(model, QuantizationConfig.model_validate(raw))
    seen = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        theirs = getattr(module, "quantization_scheme", None)
        spec = ours.spec(name)
        if theirs is None:
            assert spec is None, name
            continue
        w = theirs.weights
        want = (w.num_bits, w.group_size if w.strategy == "group" else -1)
        assert spec is not None and (spec.bits, spec.group_size) == want, name
        seen += 1
    assert seen == 2 * 7 - 3  # layer 1's q/k/v ignored
    assert ours.spec("model.layers.0.mlp.down_proj").group_size == 64  # pattern c over b
    assert ours.spec("model.layers.0.self_attn.o_proj").bits == 8  # exact name over Linear


Q = "model.layers.0.self_attn.q_proj"


def _nan_scale(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.weight_scale"][3, 1] = float("nan")


def _short_packed(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.weight_packed"] = t[f"{Q}.weight_packed"][:, :-1].contiguous()


def _missing_zero_point(t: dict[str, torch.Tensor]) -> None:
    del t[f"{Q}.weight_zero_point"]


def _float_packed(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.weight_packed"] = t[f"{Q}.weight_packed"].float()


def _fp8_nan(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.weight"].view(torch.uint8)[2, 5] = 0xFF


DEFECTS = [
    ("w4a16-g32-asym", _nan_scale, [f"'{Q}.weight_scale'", "NaN or Inf"]),
    ("w4a16-g32-asym", _short_packed, [f"'{Q}.weight_packed'", "shape [128, 7]", "[128, 8]"]),
    ("w4a16-g32-asym", _missing_zero_point, ["missing tensor", f"'{Q}.weight_zero_point'"]),
    ("w4a16-g32-asym", _float_packed, [f"'{Q}.weight_packed'", "dtype F32", "supported: I32"]),
    ("fp8-channel-dynamic", _fp8_nan, [f"'{Q}.weight' holds NaN"]),
]


@pytest.mark.parametrize(
    "source,defect,words", DEFECTS, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_broken_compressed_tensors_are_refused_in_one_line(
    written, tmp_path, source, defect, words
):
    import shutil

    path = tmp_path / "q"
    shutil.copytree(written[source][0], path)
    tensors = load_file(str(path / "model.safetensors"))
    defect(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as err:
        load_model(path, dtype=torch.float32)
    text = str(err.value)
    assert "\n" not in text
    for word in words:
        assert word in text, (word, text)


CT_QUANTIZE = {
    "int4-asym-head8": QuantizeOptions(
        "int4", head="int8", group_size=32, sym=False, layout="compressed-tensors"
    ),
    "int8-channel": QuantizeOptions("int8", group_size=-1, layout="compressed-tensors"),
    "int4-head4": QuantizeOptions("int4", head="int4", group_size=32, layout="compressed-tensors"),
    "fp8-head": QuantizeOptions("fp8", head="fp8", layout="compressed-tensors"),
}


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("untied"), "tiny", seed=7, dtype="float32", untied=True
    )


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`:UserWarning")  # dequantize
@pytest.mark.parametrize("name", CT_QUANTIZE)
def test_quantize_writes_what_transformers_and_the_library_read_back(untied, tmp_path, name):
    """`quantize --layout compressed-tensors`: transformers with the compressed-tensors
    library (its own decompression) reads every projection and the head as exactly the
    values our loader dequantizes."""
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    out = tmp_path / name
    write_quantized(untied, out, CT_QUANTIZE[name])
    theirs = AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=True)
    )
    cfg, ours = load_model(out, dtype=torch.float32)
    assert cfg.quantization is not None and cfg.quantization.method == "compressed-tensors"
    for i, layer in enumerate(theirs.model.layers):
        for field, parts in PARTS.items():
            blocks = [layer.get_submodule(p).weight.float() for p in parts]
            got = getattr(ours.layers[i], field)
            assert torch.equal(got.dequantize(torch.float32), torch.cat(blocks)), (i, field)
    head = ours.lm_head
    dense_head = head if isinstance(head, torch.Tensor) else head.dequantize(torch.float32)
    assert torch.equal(dense_head, theirs.lm_head.weight.float())
    assert isinstance(head, torch.Tensor) == (CT_QUANTIZE[name].head == "bf16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernels under the interpreter")
def test_quantize_as_compressed_tensors_then_verify(untied, tmp_path):
    out = tmp_path / "q"
    write_quantized(untied, out, CT_QUANTIZE["int4-asym-head8"])
    devices.prepare("cpu")
    result = verify(out, device="cpu", ops=OpSet.triton(pdl=False), steps=3, prompt=PROMPT[:4])
    assert result.passed, result.reason
    assert result.quantization == "compressed-tensors int4-g32-asym, head int8-g32-asym"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernels under the interpreter")
@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-llama"])
def test_other_families_load_and_verify(tmp_path, preset):
    """Qwen2 (q/k/v biases, kept dense by the library) and Llama checkpoints as W4A16."""
    src = write_random_checkpoint(tmp_path / "src", preset, seed=2, dtype="float32")
    ref = write_compressed(src, tmp_path / "q", **SCHEMES["w4a16-g32-asym"])
    _, w = load_model(tmp_path / "q", dtype=torch.float32)
    want = projection(ref, 1, "qkv_proj")
    assert torch.equal(w.layers[1].qkv_proj.dequantize(torch.float32), want)
    assert (w.layers[1].qkv_bias is not None) == (preset == "tiny-qwen2")
    devices.prepare("cpu")
    result = verify(tmp_path / "q", device="cpu", ops=OpSet.triton(pdl=False), steps=3,
                    prompt=PROMPT[:4])  # fmt: skip
    assert result.passed, result.reason
