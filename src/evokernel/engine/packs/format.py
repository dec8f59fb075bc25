"""The kernel pack's file format (pack.json), its device and model-shape keys.

pack.json, format version 1 (every key required unless marked):

    {
      "format": "evokernel-pack", "format_version": 1,
      "created": "2025-01-31T12:00:00Z",          UTC
      "evokernel": "0.1.0",                        the version that wrote it
      "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0",
                 "driver": "550.54.15" | null},    on the CPU: {"kind": "cpu", "name": "cpu",
                                                   "capability": null, "driver": null}
      "software": {"torch": "2.8.0", "triton": "3.4.0" | null, "cuda": "12.8" | null},
      "model": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
                "head_dim": 128, "intermediate_size": 3072, "dtype": "bfloat16"},
      "tasks": {
        "<task name>": {
          "op": "decode_layer",                    the engine op its programs replace
          "run": "runs/<task name>",               the search it came from (informative)
          "rule": "...",                           the dispatch rule in words (informative)
          "dispatch": [                            ascending max_len; an entry serves the
            {"max_len": 256,                       bounds above the previous entry's up to
             "scenario": "b1_ctx512",              its own (the last one also beyond)
             "context": 512,
             "program": "programs/<file>.py" | "baseline",
             "program_id": "p0007" | null,
             "speedup": 1.06 | null,               median ratio vs the fastest baseline
             "speedup_ci": [1.02, 1.09] | null},   its bootstrap 95% interval
            ...],
          "measured": {"hidden_size": 128, ...,   the layer shape the search ran (optional;
                       "stand_in": true}          on the CPU a stand-in of the model's)
        }},
      "quantized": {                               optional: a quantized checkpoint's launch
        "kept": true,                              choices (tune/quant.py); the engine runs
        "rule": "...",                             them only when kept, each bucket those its
                                                   `dispatch` entry lists (confirmed end to end)
        "choices": [{"role": "qkv", "format": "fp8", "op": "norm_linear", "k": 1024,
                     "mode": "early", "warps": 0, "tile_bytes": 0,
                     "us": 2.61 | null, "table_us": 2.65 | null,
                     "table": ["early", 0, 0] | null}, ...],    ops/quant.py's own
        "dispatch": [{"max_len": 256, "choices": [1, 4]}, ...],   indices into choices
        "end_to_end": [{"position": 1, "speedup": 1.01, "ci": [...], "control_ci": [...]}]
      },
      "hashes": {"programs/<file>.py": "sha256:<hex>", ...},   every program the tables name
      "signature": {"scheme": "hmac-sha256", "key": "<key id>", "mac": "<hex>"} | null
    }

`max_len` is the engine's host-side bound on the context (engine/graph.py `context_buckets`):
the bound a CUDA graph is captured for. The dtype is the one the programs were checked and timed
in (the device's default: bfloat16 on CUDA, float32 on the CPU). `hashes` and `signature` are
the trust model's (engine/packs/trust.py): a program runs only when its bytes match its hash and the
pack is signed with this user's key, or the user says to trust it. The `quantized` choices
are data, not code: values from the closed sets of ops/tuning.py (`check_tuning`) that pick
among the engine's own kernels, each giving the same result up to float32 summation order;
they need no trust, only validation (engine/packs/load.py).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evokernel.errors import EvokernelError
from evokernel.model.config import ModelConfig
from evokernel.ops.candidates import OP_TASKS

FORMAT = "evokernel-pack"
FORMAT_VERSION = 1
PACK_FILE = "pack.json"
PROGRAMS_DIR = "programs"
RUNS_DIR = "runs"
BASELINE = "baseline"

# Engine ops a pack may replace, by the base name of the task that searches them.
PACK_OPS: dict[str, str] = {t.task: op for op, t in OP_TASKS.items() if t.pack}

SHAPE_KEYS = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
)
DTYPES = ("bfloat16", "float16", "float32")
# The model's family and weight format, beside its shapes: a pack's programs are compiled for
# one family's switches (bias, q/k norms) and one weight layout. Packs written before these
# keys existed were all Qwen3 with dense weights: missing keys read as those.
FAMILY_KEYS = {"model_type": "qwen3", "weights": "dense"}


class PackError(EvokernelError):
    """A kernel pack that cannot be written or is refused: one line naming the pack."""


@dataclass(frozen=True)
class PackEntry:
    max_len: int
    scenario: str
    context: int
    program: str  # "programs/<file>.py" relative to the pack directory, or "baseline"
    program_id: str | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    # tune/confirm.py: the whole decode step with / without the pack, timed interleaved at
    # positions in this bucket: ({"position", "speedup", "ci"}, ...); () where not measured.
    end_to_end: tuple[dict[str, Any], ...] = ()

    @property
    def is_baseline(self) -> bool:
        return self.program == BASELINE

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_len": self.max_len,
            "scenario": self.scenario,
            "context": self.context,
            "program": self.program,
            "program_id": self.program_id,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci is not None else None,
            "end_to_end": [dict(e) for e in self.end_to_end],
        }


@dataclass(frozen=True)
class TaskTable:
    task: str
    op: str
    entries: tuple[PackEntry, ...]
    run: str = ""
    rule: str = ""
    # The layer shape the search measured (SHAPE_KEYS, plus "stand_in": true when it was a
    # smaller stand-in of the model's layer, as on the CPU); None where not recorded.
    measured: dict[str, Any] | None = None

    def entry_for(self, max_len: int) -> PackEntry:
        """The entry serving context bound `max_len`: the first whose max_len >= it, else
        the last."""
        for entry in self.entries:
            if max_len <= entry.max_len:
                return entry
        return self.entries[-1]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "op": self.op,
            "run": self.run,
            "rule": self.rule,
            "dispatch": [e.to_dict() for e in self.entries],
        }
        if self.measured is not None:
            out["measured"] = dict(self.measured)
        return out


@dataclass(frozen=True)
class QuantChoice:
    """How one packed projection may run (ops/quant.py `choice`), as tune measured it: with
    this setting (`us`) and with ops/quant.py's table setting (`table_us`), in the unit of
    the search that proposed it (`source`: a stage graph's microseconds per layer, or the
    whole decode step's)."""

    role: str  # qkv, o_proj, gate_up, down or head (informative)
    format: str
    op: str
    k: int
    mode: str
    warps: int
    tile_bytes: int
    us: float | None = None
    table_us: float | None = None
    table: tuple[str, int, int] | None = None  # ops/quant.py's own (mode, warps, tile bytes)
    source: str = ""  # "table", or the search that proposed it ("stage search", "step search")

    @property
    def setting(self) -> tuple[str, int, int]:
        return (self.mode, self.warps, self.tile_bytes)

    @property
    def table_setting(self) -> tuple[str, int, int]:
        """The table's (mode, warps, tile bytes) for this role (this choice's where unknown)."""
        return self.table or (self.mode, self.warps, self.tile_bytes)

    def as_table(self) -> QuantChoice:
        """This role at the table's setting (its stage time the table's)."""
        mode, warps, tile = self.table_setting
        return dataclasses.replace(self, mode=mode, warps=warps, tile_bytes=tile,
                                   us=self.table_us)  # fmt: skip

    def entry(self) -> tuple[str, str, int, str, int, int]:
        """The `DecodeTuning.quant` entry the engine runs."""
        return (self.format, self.op, self.k, self.mode, self.warps, self.tile_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role, "format": self.format, "op": self.op, "k": self.k,
            "mode": self.mode, "warps": self.warps, "tile_bytes": self.tile_bytes,
            "us": self.us, "table_us": self.table_us,
            "table": list(self.table) if self.table is not None else None,
            "source": self.source,
        }  # fmt: skip


Entries = tuple[tuple[str, str, int, str, int, int], ...]  # DecodeTuning.quant


@dataclass(frozen=True)
class QuantLaunch:
    """A quantized checkpoint's measured launch choices: `choices`, every setting tune
    measured (each role's table setting, then what its searches proposed), and per engine
    context bucket the indices of those the engine runs there (`dispatch`: (max_len,
    indices), ascending, every bucket; none: the table's). The head's choice runs only where
    every bucket lists it (the head op is not chosen per bucket). Run only when `kept`."""

    choices: tuple[QuantChoice, ...]
    kept: bool
    rule: str = ""
    dispatch: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # tune/quant.py: the whole decode step with / without them, timed interleaved, by position:
    # ({"position", "speedup", "ci", "control_ci"}, ...); () where not measured.
    end_to_end: tuple[dict[str, Any], ...] = ()

    def bucket_entries(self) -> list[tuple[int, Entries]]:
        """Per bucket, the `DecodeTuning.quant` entries the engine runs there."""
        return [(b, tuple(self.choices[i].entry() for i in idx)) for b, idx in self.dispatch]

    def shared_entries(self) -> Entries:
        """The entries every bucket runs (what the ops outside a layer, the head, run)."""
        if not self.dispatch:
            return ()
        common = set.intersection(*(set(idx) for _, idx in self.dispatch))
        return tuple(self.choices[i].entry() for i in sorted(common))

    @property
    def runs(self) -> bool:
        """Whether the engine runs any choice of this pack."""
        return self.kept and any(idx for _, idx in self.dispatch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "rule": self.rule,
            "choices": [c.to_dict() for c in self.choices],
            "dispatch": [{"max_len": b, "choices": list(idx)} for b, idx in self.dispatch],
            "end_to_end": [dict(e) for e in self.end_to_end],
        }


@dataclass(frozen=True)
class Pack:
    path: Path  # the pack directory
    created: str
    evokernel: str
    device: dict[str, Any]
    software: dict[str, Any]
    model: dict[str, Any]
    tasks: dict[str, TaskTable] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)  # program -> "sha256:<hex>"
    signature: dict[str, Any] | None = None
    quantized: QuantLaunch | None = None
    # Not in pack.json: how this process came to trust the pack's programs (engine/packs/trust.py),
    # set by packs.use.open_pack once they are admitted; None before.
    trust: str | None = field(default=None, compare=False)

    def table_for(self, op: str) -> TaskTable | None:
        """The dispatch table of the task that replaces engine op `op` (None: no such task)."""
        return next((t for t in self.tasks.values() if t.op == op), None)

    def programs(self) -> list[Path]:
        """Every program file the pack's tables name, once each."""
        names = {e.program for t in self.tasks.values() for e in t.entries if not e.is_baseline}
        return [self.path / name for name in sorted(names)]

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": self.created,
            "evokernel": self.evokernel,
            "device": self.device,
            "software": self.software,
            "model": self.model,
            "tasks": {name: t.to_dict() for name, t in self.tasks.items()},
            "hashes": dict(self.hashes),
            "signature": self.signature,
        }
        if self.quantized is not None:
            doc["quantized"] = self.quantized.to_dict()
        return doc


def task_op(task: str) -> str | None:
    """The engine op a task's programs replace (`decode_layer@H...` -> `decode_layer`)."""
    return PACK_OPS.get(task.split("@", 1)[0])


def dtype_name(dtype: torch.dtype | str) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


def weights_format(cfg: ModelConfig) -> str:
    """The projections' format: "dense", or the checkpoint's quantization (method, the
    layers' storage, and the head's: `gptq int4 g128, head dense`)."""
    q = cfg.quantization
    if q is None:
        return "dense"
    return q.describe(q.spec("lm_head") if not cfg.tie_word_embeddings else None)


def shape_key(cfg: ModelConfig, dtype: torch.dtype | str) -> dict[str, Any]:
    """The model a pack is for: its family and weight format, the layer's shapes and the
    dtype it runs in."""
    family = {"model_type": cfg.model_type, "weights": weights_format(cfg)}
    return {**family, **{k: getattr(cfg, k) for k in SHAPE_KEYS}, "dtype": dtype_name(dtype)}


def family_of(key: dict[str, Any]) -> dict[str, Any]:
    """A recorded model's family keys, with the defaults of packs that predate them."""
    return {k: key.get(k, default) for k, default in FAMILY_KEYS.items()}


def describe_shape(key: dict[str, Any]) -> str:
    """`qwen3 (dense): hidden 1024, heads 16:8, head_dim 128, intermediate 3072` (the family
    only where the key names one: a measured layer's shape does not)."""
    family = family_of(key)
    named = any(k in key for k in FAMILY_KEYS)
    return (
        (f"{family['model_type']} ({family['weights']}): " if named else "")
        + f"hidden {key.get('hidden_size')}, heads {key.get('num_attention_heads')}:"
        f"{key.get('num_key_value_heads')}, head_dim {key.get('head_dim')}, "
        f"intermediate {key.get('intermediate_size')}"
    )


def describe_device(device: str) -> dict[str, Any]:
    """This machine's `device` as a pack records it: the GPU's name, compute capability and
    driver (null when NVML does not answer); on the CPU the name is "cpu"."""
    if device != "cuda":
        return {"kind": "cpu", "name": "cpu", "capability": None, "driver": None}
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return {
        "kind": "cuda",
        "name": torch.cuda.get_device_name(index),
        "capability": f"{major}.{minor}",
        "driver": _driver(index),
    }


def _driver(index: int) -> str | None:
    from evokernel.nvml import Nvml

    gpu = Nvml.open(index)
    return gpu.driver() if gpu is not None else None


def software_versions() -> dict[str, Any]:
    """torch, Triton (read from its metadata: importing triton fixes its mode) and CUDA."""
    try:
        triton: str | None = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return {"torch": torch.__version__, "triton": triton, "cuda": torch.version.cuda}


def safe_name(text: str) -> str:
    """`text` as a file-name part: ASCII letters, digits, `.`, `_`, `-` and `@` only (a task
    name such as `decode_layer@H64-Hq4-Hkv2-D32-I192` stays as it is)."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "._-@" else "_" for c in text)
