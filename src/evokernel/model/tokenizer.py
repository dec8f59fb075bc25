"""Tokenizers: the byte-level one random checkpoints ship, and loading any checkpoint's.

`write_byte_tokenizer(out_dir, vocab_size)` writes `tokenizer.json` + `tokenizer_config.json`:
a byte-level BPE with no merges, so every UTF-8 byte is one token whose id is the byte value
(0-255), plus Qwen3's special tokens (see `presets.special_token_ids`). Any text round-trips,
ids stay below `vocab_size`, and both `tokenizers.Tokenizer.from_file` and
`transformers.AutoTokenizer` load it. Its tokenizer_config.json carries the ChatML chat
template Qwen3 uses (templates/chatml.jinja), so chat prompts work on random checkpoints too.

`load_tokenizer(model_dir)` returns a `tokenizers.Tokenizer` for a checkpoint's tokenizer.json
(the hub's Qwen3 tokenizer included), or raises `CheckpointError` when there is none.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from evokernel.errors import CheckpointError, ConfigError
from evokernel.model.config import is_regular_file
from evokernel.model.presets import MIN_VOCAB, SPECIAL_TOKENS, special_token_ids

TOKENIZER_FILE = "tokenizer.json"


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's byte -> printable character table, which byte-level BPE vocabularies are keyed by.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def build_byte_tokenizer(vocab_size: int) -> Tokenizer:
    if vocab_size < MIN_VOCAB:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small for the byte tokenizer (needs {MIN_VOCAB})"
        )
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab |= dict(zip(SPECIAL_TOKENS, special_token_ids(vocab_size)))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    return tok


CHATML = Path(__file__).parent / "templates" / "chatml.jinja"  # Qwen3's ChatML with its think block


def write_byte_tokenizer(out_dir: Path, vocab_size: int, max_length: int) -> None:
    build_byte_tokenizer(vocab_size).save(str(out_dir / TOKENIZER_FILE))
    eot, _, im_end = SPECIAL_TOKENS
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": im_end,
        "pad_token": eot,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": CHATML.read_text(),
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    path = Path(model_dir) / TOKENIZER_FILE
    if not is_regular_file(path):
        raise CheckpointError(f"{model_dir}: no {TOKENIZER_FILE} (use --prompt-ids instead)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises plain Exception on bad files
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: cannot load tokenizer ({msg})") from None
