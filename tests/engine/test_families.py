"""Every family through every verb, on checkpoints transformers writes itself.

For Llama (`llama3` RoPE scaling, GQA 4:1, untied head), Qwen2 (q/k/v biases, no q/k norms),
Qwen3 (q/k norms, untied) and Mistral (no sliding window): a randomly initialised
`*ForCausalLM` saved with `save_pretrained` loads, our RoPE table is transformers' own,
`verify` passes with the torch ops and with the Triton kernels under the interpreter, and
`generate --prompt` runs with a tokenizer in the directory. The random presets of each
family verify too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evokernel.cli import main
from evokernel.engine.verify import verify
from evokernel.model.config import ModelConfig
from evokernel.model.random import write_random_checkpoint
from evokernel.model.tokenizer import write_byte_tokenizer
from evokernel.ops.rope import inverse_frequencies

VOCAB = 300
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    bos_token_id=256,
    eos_token_id=258,
)


def _llama() -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    scaling = {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64, "rope_theta": 500000.0,
    }  # fmt: skip
    return LlamaForCausalLM(LlamaConfig(**COMMON, rope_parameters=scaling))


def _qwen2() -> object:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**COMMON))


def _qwen3() -> object:
    from transformers import Qwen3Config as HFQwen3Config
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM(HFQwen3Config(**COMMON, head_dim=32))


def _mistral() -> object:
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM(MistralConfig(**COMMON, sliding_window=None))


FAMILIES = {"llama": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "mistral": _mistral}


@pytest.fixture(scope="module", params=list(FAMILIES))
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the family written by transformers (float32, HF's own init made a
    little larger so that greedy decoding has margins), with a byte tokenizer beside it."""
    torch.manual_seed(0)
    model = FAMILIES[request.param]()
    with torch.no_grad():
        for name, p in model.named_parameters():  # type: ignore[attr-defined]
            if name.endswith("bias"):
                p.normal_(0.0, 0.2)  # HF initialises biases to 0: make them matter
            elif p.dim() == 2:
                p.mul_(10.0)  # N(0, 0.02) -> N(0, 0.2): logits with margins
    out = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(out)  # type: ignore[attr-defined]
    write_byte_tokenizer(out, VOCAB, 512)
    return out


def test_the_config_is_the_family_transformers_wrote(saved: Path) -> None:
    cfg = ModelConfig.from_dir(saved)
    kind = json.loads((saved / "config.json").read_text())["model_type"]
    assert cfg.model_type == kind and not cfg.tie_word_embeddings
    assert cfg.qkv_bias == (kind == "qwen2") and cfg.qk_norm == (kind == "qwen3")
    assert (cfg.rope_scaling is not None) == (kind == "llama")


def test_rope_frequencies_are_transformers(saved: Path) -> None:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = ModelConfig.from_dir(saved)
    hf = AutoConfig.from_pretrained(saved)
    kind = hf.rope_parameters["rope_type"]
    if kind == "default":
        dim = cfg.head_dim
        want = 1.0 / (hf.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2).float() / dim))
    else:
        want, _ = ROPE_INIT_FUNCTIONS[kind](hf, "cpu")
    got = inverse_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, "cpu")
    assert torch.allclose(got, want, rtol=1e-6, atol=0), (got - want).abs().max()


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_verify_passes(saved: Path, ops: str) -> None:
    result = verify(saved, device="cpu", ops=ops, steps=6 if ops == "triton" else 10)
    assert result.passed, result.reason
    assert result.kl_mean < 1e-8 and result.argmax_agreement == 1.0


@pytest.mark.parametrize("chat", [False, True])
def test_generate_with_a_prompt(
    saved: Path, chat: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["generate", "--model", str(saved), "--device", "cpu", "--prompt", "hello",
         "--max-new-tokens", "5", "--json", *(["--chat"] if chat else [])]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert 1 <= len(result["tokens"]) <= 5
    # ChatML: "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", a special token
    # each marker and a byte each character: 5 + 19 tokens
    assert result["prompt_len"] == (len("hello") + 19 if chat else len("hello"))


def test_chat_without_a_template_is_one_line(saved: Path, tmp_path: Path) -> None:
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(saved, bare)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    code, err = _run(["generate", "--model", str(bare), "--device", "cpu", "--prompt", "hi",
                      "--max-new-tokens", "2", "--chat"])  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "has no chat template" in err
    code, err = _run(["generate", "--model", str(bare), "--device", "cpu", "--prompt", "hi",
                      "--max-new-tokens", "2", "--chat", "--chat-template", "chatml"])  # fmt: skip
    assert code == 0, err


def _run(argv: list[str]) -> tuple[int, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "evokernel", *argv], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen2"])
def test_random_presets_of_each_family_verify(preset: str, tmp_path: Path) -> None:
    path = write_random_checkpoint(tmp_path / preset, preset, seed=1, dtype="float32")
    cfg = ModelConfig.from_dir(path)
    assert cfg.model_type == {"tiny-llama": "llama", "tiny-qwen2": "qwen2"}[preset]
    result = verify(path, device="cpu", ops="torch", steps=8)
    assert result.passed, result.reason
    assert result.argmax_agreement == 1.0


def test_real_shapes_of_each_family_are_presets() -> None:
    from evokernel.model.presets import PRESETS
    from evokernel.model.random import resolve_options

    want = {  # (model_type, layers, hidden, heads, kv heads, head_dim, vocab, tied)
        "llama-3.2-1b": ("llama", 16, 2048, 32, 8, 64, 128256, True),
        "qwen2.5-0.5b": ("qwen2", 24, 896, 14, 2, 64, 151936, True),
        "qwen2.5-1.5b": ("qwen2", 28, 1536, 12, 2, 128, 151936, True),
        "smollm2-135m": ("llama", 30, 576, 9, 3, 64, 49152, True),
    }
    for name, shape in want.items():
        assert name in PRESETS
        cfg, _ = resolve_options(name, "bfloat16", {})
        got = (
            cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size, cfg.tie_word_embeddings,
        )  # fmt: skip
        assert got == shape, name
