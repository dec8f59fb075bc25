"""`quantization_config` of a config.json, parsed once into a `QuantConfig`.

Three published weight-only layouts are read (docs/quantization.md has their tensors):

  quant_method "fp8"   Qwen's / DeepSeek's block FP8 (transformers' `FineGrainedFP8Config`):
                       `fmt: e4m3`, `activation_scheme: dynamic`, `weight_block_size: [bn, bk]`,
                       `modules_to_not_convert` (transformers' matching: prefix, regex or suffix;
                       absent, the head stays dense as transformers keeps it); and per-tensor
                       FP8, `weight_block_size` null or absent: transformers' (one
                       `weight_scale_inv` a module) and AutoFP8's (`weight_scale`, the head in
                       `ignored_layers`), activations "dynamic" or "static" (a stored
                       per-tensor `activation_scale` / `input_scale`, checked but not applied:
                       the engine runs the activations in the model dtype, as for dynamic)
  quant_method "gptq"  GPTQ (AutoGPTQ / GPTQModel): `bits` 4 or 8, `group_size` (-1: one group
                       per row), `sym`, `desc_act`, `checkpoint_format` / `format` "gptq" (v1,
                       zeros stored minus one) or "gptq_v2"; `lm_head` (the head quantized too),
                       `dynamic` (vLLM's and GPTQModel's per-module rules: "-:regex" leaves the
                       matched modules dense, "+:regex" / "regex" overrides bits, group_size,
                       sym or desc_act for them), `modules_in_block_to_quantize`
  quant_method "awq"   AutoAWQ's GEMM layout: `bits` / `w_bit` 4, `group_size` / `q_group_size`,
                       `zero_point: true`, `version` / `format` "gemm", `modules_to_not_convert`
  quant_method "compressed-tensors"   llm-compressor's checkpoints (the compressed-tensors
                       library): `format` "pack-quantized" (int4 / int8 weights, strategy
                       "group" or "channel", symmetric or with zero points, `actorder` "group"
                       with a `weight_g_idx`; no activation quantization: W4A16, W8A16),
                       "int-quantized" (int8 weights as int8, activations none or dynamic:
                       W8A8, the activations left in the model dtype) or
                       "float-quantized" / "naive-quantized" (FP8 e4m3 weights, strategy
                       "channel", "tensor" or "block"; activations none or dynamic, which the
                       engine leaves in the model dtype as it does Qwen's dynamic FP8), per
                       `config_groups` entry (`targets` "Linear", module names or "re:"
                       patterns; the most specific target naming a module wins, as the
                       library applies them), `ignore` (names or "re:" patterns),
                       `quantization_status` "compressed"

`QuantConfig.spec(module)` says how one linear module (an HF prefix such as
`model.layers.3.self_attn.q_proj` or `lm_head`) is stored: a `ModuleSpec`, or None for a dense
module. Anything these formats can say that the kernels do not run is a `CheckpointError` of
one line naming the field and its value (2- and 3-bit GPTQ, AWQ GEMV or zero_point false, FP8
e5m2 or an FP8 KV cache, compressed-tensors' NVFP4, MXFP4 or sparse formats, bitsandbytes,
...).

`raw` keeps the dict as read, so that `ModelConfig.to_hf_dict` writes it back unchanged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from evokernel.errors import CheckpointError

METHODS = ("fp8", "gptq", "awq", "compressed-tensors")
CT = "compressed-tensors"
# pack-quantized: int weights packed into int32; float-quantized (FP8 weights, FP8
# activations) and naive-quantized (FP8 weights alone, as the library names it): FP8 as is
# int-quantized: int8 weights as int8 (W8A8: activations dynamic, which the engine leaves in
# the model dtype)
CT_FORMATS = ("pack-quantized", "int-quantized", "float-quantized", "naive-quantized")
CT_WHOLE = 0  # a compressed-tensors FP8 scale block dimension spanning the whole weight
CT_FIELDS = ("num_bits", "group_size", "symmetric")  # its names for bits, group, sym
GPTQ_FORMATS = ("gptq", "gptq_v2")
FP8_FORMATS = ("e4m3",)
HEAD = "lm_head"


@dataclass(frozen=True)
class ModuleSpec:
    """How one linear module is stored.

    method "fp8": float8_e4m3fn weight + float scales per (block_n x block_k) block, or one
    scale a module (block (CT_WHOLE, CT_WHOLE): per-tensor FP8); `act_scale`: a per-tensor
    activation scale is stored beside it (static activations), checked and not applied.
    method "gptq"/"awq": `bits`-bit integers with a scale and zero point per group of
    `group_size` input columns (-1: the whole row); `sym` GPTQ zeros are 2**(bits-1);
    `desc_act` GPTQ stores a `g_idx` that may be any grouping of the columns.
    method "ct-int" (compressed-tensors pack-quantized): as GPTQ's, packed along the rows;
    `desc_act`: a `weight_g_idx` (actorder "group"). "ct-int8" (int-quantized): int8 as is.
    method "ct-fp8" (compressed-tensors float-quantized): as "fp8", a `block` dimension of
    CT_WHOLE spanning the weight (strategy "channel": (1, CT_WHOLE); "tensor": both)."""

    method: str
    bits: int
    group_size: int = -1  # integer formats; -1 = one group per row
    sym: bool = True
    desc_act: bool = False
    block: tuple[int, int] = (0, 0)  # fp8: (rows, columns) per scale
    zero_offset: int = 0  # stored zero + offset = zero point (GPTQ v1: 1)
    act_scale: bool = False  # fp8: a static activation scale stored per module

    @property
    def label(self) -> str:
        """Short name for tables: `fp8-b128x128`, `int4-g128`, `int8-g-1-asym`."""
        if self.method in ("fp8", "ct-fp8"):
            named = {(1, CT_WHOLE): "channel", (CT_WHOLE, CT_WHOLE): "tensor"}
            text = f"fp8-{named.get(self.block, f'b{self.block[0]}x{self.block[1]}')}"
            return text + ("-static" if self.act_scale else "")
        text = f"int{self.bits}-g{self.group_size}"
        if not self.sym:
            text += "-asym"
        if self.desc_act:
            text += "-act"
        return text


@dataclass(frozen=True)
class QuantConfig:
    method: str
    default: ModuleSpec
    modules_to_not_convert: tuple[str, ...] = ()
    # The head is quantized too: gptq `lm_head: true`; fp8 when `modules_to_not_convert` is
    # given (transformers then converts all but those; absent, it keeps the output embedding
    # dense by default); never for awq (AutoAWQ does not quantize it)
    head: bool = False
    dynamic: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # gptq rules, in order
    in_block: tuple[str, ...] | None = None  # gptq modules_in_block_to_quantize, flattened
    # compressed-tensors: (targets, spec) per config group, in order, and `ignore`
    groups: tuple[tuple[tuple[str, ...], ModuleSpec], ...] = ()
    ignore: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    def spec(self, module: str) -> ModuleSpec | None:
        """The storage of linear module `module` (HF prefix), None when it is dense."""
        if self.method == CT:
            return _ct_scheme(module, self.groups, self.ignore)
        if self.method in ("fp8", "awq"):
            if module == HEAD and not self.head:
                return None
            if _excluded(module, self.modules_to_not_convert):
                return None
            return self.default
        # gptq
        if module == HEAD and not self.head:
            return None
        listed = self.in_block is None or any(module.endswith("." + n) for n in self.in_block)
        if module != HEAD and not listed:
            return None
        spec = self.default
        for pattern, override in self.dynamic:
            negative = pattern.startswith("-:")
            if re.match(pattern.removeprefix("-:").removeprefix("+:"), module):
                if negative:
                    return None
                return _override(spec, dict(override), pattern)
        return spec

    def describe(self, head: ModuleSpec | None) -> str:
        head_text = head.label if head is not None else "dense"
        return f"{self.method} {self.default.label}, head {head_text}"


def parse_quantization(d: Any, source: str) -> QuantConfig:
    """Parse the `quantization_config` object of `source` (a config.json)."""
    where = f"{source}: quantization_config"
    if not isinstance(d, dict):
        raise CheckpointError(f"{where} must be an object, got {_show(d)}")
    method = d.get("quant_method")
    if method not in METHODS:
        raise CheckpointError(
            f"{where}.quant_method {_show(method)} is not supported (supported: "
            f"{', '.join(METHODS)})"
        )
    if method == "fp8":
        return _parse_fp8(d, where)
    if method == "gptq":
        return _parse_gptq(d, where)
    if method == CT:
        return _parse_ct(d, where)
    return _parse_awq(d, where)


def _parse_fp8(d: dict[str, Any], where: str) -> QuantConfig:
    fmt = d.get("fmt", "e4m3")
    if fmt not in FP8_FORMATS:
        raise CheckpointError(f"{where}.fmt {_show(fmt)} is not supported (e4m3)")
    scheme = d.get("activation_scheme", "dynamic")
    if scheme not in ("dynamic", "static"):
        raise CheckpointError(
            f"{where}.activation_scheme {_show(scheme)} is not supported (dynamic, static: the "
            "activations run in the model dtype either way)"
        )
    if d.get("kv_cache_scheme") is not None:
        raise CheckpointError(
            f"{where}.kv_cache_scheme {_show(d.get('kv_cache_scheme'))} is not supported (an "
            "FP8 KV cache; the engine's cache is in the model dtype)"
        )
    if d.get("scale_fmt") not in (None, "float"):
        raise CheckpointError(f"{where}.scale_fmt {_show(d.get('scale_fmt'))} is not supported")
    block = d.get("weight_block_size")
    ok = block is None or (
        isinstance(block, list)
        and len(block) == 2
        and all(_is_int(b) and b > 0 for b in block)
        and _pow2(block[1])
        and 16 <= block[1] <= 1024
    )
    if not ok:
        raise CheckpointError(
            f"{where}.weight_block_size {_show(block)} is not supported ([rows, columns] with "
            "columns a power of two in 16..1024, or null: one scale a module)"
        )
    # null or absent: per-tensor scales, as AutoFP8 writes it and vLLM's Fp8Config reads it
    # (`weight_block_size` defaulting to None there; transformers' config defaults to 128x128)
    shape = (CT_WHOLE, CT_WHOLE) if block is None else (int(block[0]), int(block[1]))
    spec = ModuleSpec("fp8", 8, block=shape, act_scale=scheme == "static")
    # AutoFP8 (and MiniMax) name the modules kept dense `ignored_layers`, as transformers reads
    key = "modules_to_not_convert" if "modules_to_not_convert" in d else "ignored_layers"
    skip = _names(d.get(key), f"{where}.{key}")
    listed = d.get(key) is not None
    return QuantConfig("fp8", spec, modules_to_not_convert=skip, head=listed, raw=dict(d))


def _parse_gptq(d: dict[str, Any], where: str) -> QuantConfig:
    fmt = d.get("checkpoint_format", d.get("format", "gptq"))
    if not isinstance(fmt, str) or fmt.lower() not in GPTQ_FORMATS:
        field_name = "checkpoint_format" if "checkpoint_format" in d else "format"
        raise CheckpointError(
            f"{where}.{field_name} {_show(fmt)} is not supported ({', '.join(GPTQ_FORMATS)})"
        )
    offset = 1 if fmt.lower() == "gptq" else 0
    spec = _int_spec(
        "gptq",
        d.get("bits"),
        d.get("group_size", 128),
        d.get("sym", True),
        d.get("desc_act", False),
        offset,
        where,
    )
    dynamic_raw = d.get("dynamic") or {}
    if not isinstance(dynamic_raw, dict):
        raise CheckpointError(f"{where}.dynamic must be an object, got {_show(dynamic_raw)}")
    dynamic: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for pattern, override in dynamic_raw.items():
        try:
            re.compile(pattern.removeprefix("-:").removeprefix("+:"))
        except re.error as err:
            raise CheckpointError(f"{where}.dynamic: bad pattern {pattern!r} ({err})") from None
        if not isinstance(override, dict):
            raise CheckpointError(f"{where}.dynamic[{pattern!r}] must be an object")
        unknown = sorted(set(override) - {"bits", "group_size", "sym", "desc_act"})
        if unknown and not pattern.startswith("-:"):
            raise CheckpointError(
                f"{where}.dynamic[{pattern!r}].{unknown[0]} is not supported (bits, "
                "group_size, sym, desc_act)"
            )
        if not pattern.startswith("-:"):
            _override(spec, override, pattern, where)  # refuse bad values now
        dynamic.append((pattern, tuple(sorted(override.items()))))
    head = d.get("lm_head", False)
    if not isinstance(head, bool):
        raise CheckpointError(f"{where}.lm_head must be true or false, got {_show(head)}")
    in_block = d.get("modules_in_block_to_quantize")
    flat: tuple[str, ...] | None = None
    if in_block is not None:
        groups = in_block if isinstance(in_block, list) else None
        names = [n for g in groups or [] if isinstance(g, list) for n in g]
        if groups is None or not all(isinstance(n, str) for n in names):
            raise CheckpointError(
                f"{where}.modules_in_block_to_quantize must be a list of lists of names"
            )
        flat = tuple(names)
    return QuantConfig("gptq", spec, head=head, dynamic=tuple(dynamic), in_block=flat, raw=dict(d))


def _parse_awq(d: dict[str, Any], where: str) -> QuantConfig:
    version = d.get("version", d.get("format", "gemm"))
    if not isinstance(version, str) or version.lower() != "gemm":
        field_name = "version" if "version" in d else "format"
        raise CheckpointError(
            f"{where}.{field_name} {_show(version)} is not supported (gemm: AutoAWQ's GEMM layout)"
        )
    if d.get("zero_point", True) is not True:
        raise CheckpointError(
            f"{where}.zero_point {_show(d.get('zero_point'))} is not supported (true)"
        )
    bits = d.get("bits", d.get("w_bit"))
    if bits != 4:
        field_name = "bits" if "bits" in d else "w_bit"
        raise CheckpointError(f"{where}.{field_name} {_show(bits)} is not supported (AWQ: 4)")
    group = d.get("group_size", d.get("q_group_size", 128))
    spec = _int_spec("awq", 4, group, False, False, 0, where)
    skip = _names(d.get("modules_to_not_convert"), f"{where}.modules_to_not_convert")
    return QuantConfig("awq", spec, modules_to_not_convert=skip, raw=dict(d))


def _parse_ct(d: dict[str, Any], where: str) -> QuantConfig:
    """compressed-tensors' `QuantizationConfig` as llm-compressor saves it."""
    status = d.get("quantization_status", "compressed")
    if status != "compressed":
        raise CheckpointError(
            f"{where}.quantization_status {_show(status)} is not supported (compressed: the "
            "weights stored packed)"
        )
    for name in ("sparsity_config", "transform_config", "kv_cache_scheme", "moe_sparsity_config"):
        if d.get(name):
            raise CheckpointError(f"{where}.{name} is not supported (none: {_show(d[name])})")
    groups_raw = d.get("config_groups")
    if not isinstance(groups_raw, dict) or not groups_raw:
        raise CheckpointError(f"{where}.config_groups must be a non-empty object")
    default_format = d.get("format")
    groups: list[tuple[tuple[str, ...], ModuleSpec]] = []
    for gname, group in groups_raw.items():
        at = f"{where}.config_groups.{gname}"
        if not isinstance(group, dict):
            raise CheckpointError(f"{at} must be an object, got {_show(group)}")
        fmt = group.get("format") or default_format
        if fmt not in CT_FORMATS:
            raise CheckpointError(
                f"{at}.format {_show(fmt)} is not supported ({', '.join(CT_FORMATS)})"
            )
        targets = _names(group.get("targets"), f"{at}.targets")
        if not targets:
            raise CheckpointError(f"{at}.targets must name at least one module")
        for t in targets:
            if not (t == "Linear" or t.startswith("re:") or "." in t or t == HEAD):
                raise CheckpointError(
                    f"{at}.targets {_show(t)} is not supported (Linear, module names or "
                    "re:<pattern>)"
                )
            if t.startswith("re:"):
                _ct_pattern(t, f"{at}.targets")
        if group.get("output_activations") is not None:
            raise CheckpointError(f"{at}.output_activations is not supported (null)")
        groups.append((targets, _ct_spec(group, fmt, at)))
    ignore = _names(d.get("ignore"), f"{where}.ignore")
    for name in ignore:
        if name.startswith("re:"):
            _ct_pattern(name, f"{where}.ignore")
    spec = groups[0][1]
    return QuantConfig(CT, spec, groups=tuple(groups), ignore=ignore, raw=dict(d))


def _ct_spec(group: dict[str, Any], fmt: str, at: str) -> ModuleSpec:
    w = group.get("weights")
    if not isinstance(w, dict):
        raise CheckpointError(f"{at}.weights must be an object, got {_show(w)}")
    bits, kind, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
    if w.get("dynamic", False) is not False:
        raise CheckpointError(f"{at}.weights.dynamic {_show(w.get('dynamic'))} is not supported")
    acts = group.get("input_activations")
    if fmt in ("pack-quantized", "int-quantized"):
        if fmt == "pack-quantized" and acts is not None:
            raise CheckpointError(
                f"{at}.input_activations is not supported with pack-quantized (null: the "
                "weights alone are quantized)"
            )
        _ct_dynamic(acts, at)
        if fmt == "int-quantized" and bits != 8:
            raise CheckpointError(
                f"{at}.weights.num_bits {_show(bits)} is not supported with int-quantized (8)"
            )
        if kind != "int":
            raise CheckpointError(f"{at}.weights.type {_show(kind)} is not supported (int)")
        if strategy not in ("group", "channel"):
            raise CheckpointError(
                f"{at}.weights.strategy {_show(strategy)} is not supported (group, channel)"
            )
        group_size = w.get("group_size") if strategy == "group" else -1
        actorder = w.get("actorder")
        if actorder not in (None, False, "group", "weight", "static"):
            raise CheckpointError(
                f"{at}.weights.actorder {_show(actorder)} is not supported (group, weight)"
            )
        method = "ct-int" if fmt == "pack-quantized" else "ct-int8"
        sym = w.get("symmetric", True)
        return _int_spec(
            method, bits, group_size, sym, actorder == "group", 0, f"{at}.weights", CT_FIELDS
        )
    _ct_dynamic(acts, at)
    if kind != "float" or bits != 8:
        raise CheckpointError(
            f"{at}.weights type {_show(kind)} num_bits {_show(bits)} is not supported with "
            f"{fmt} (float 8: e4m3)"
        )
    if strategy == "channel":
        block = (1, CT_WHOLE)
    elif strategy == "tensor":
        block = (CT_WHOLE, CT_WHOLE)
    elif strategy == "block":
        bs = w.get("block_structure")
        if not (isinstance(bs, list) and len(bs) == 2 and all(_is_int(b) and b > 0 for b in bs)):
            raise CheckpointError(f"{at}.weights.block_structure {_show(bs)} is not supported")
        if not (_pow2(bs[1]) and 16 <= bs[1] <= 1024):
            raise CheckpointError(
                f"{at}.weights.block_structure {_show(bs)} is not supported (columns a power "
                "of two in 16..1024)"
            )
        block = (int(bs[0]), int(bs[1]))
    else:
        raise CheckpointError(
            f"{at}.weights.strategy {_show(strategy)} is not supported for FP8 (channel, "
            "tensor, block)"
        )
    if w.get("symmetric", True) is not True:
        raise CheckpointError(f"{at}.weights.symmetric false is not supported for FP8")
    return ModuleSpec("ct-fp8", 8, block=block)


def _ct_dynamic(acts: Any, at: str) -> None:
    """Activation quantization is read only where it is dynamic (the engine then runs the
    activations in the model dtype, as the weight-only formats)."""
    if acts is not None and (not isinstance(acts, dict) or acts.get("dynamic") is not True):
        value = acts.get("dynamic") if isinstance(acts, dict) else acts
        raise CheckpointError(
            f"{at}.input_activations.dynamic {_show(value)} is not supported (true, or no "
            "activation quantization: static activation scales are not read)"
        )


def _ct_scheme(
    module: str, groups: tuple[tuple[tuple[str, ...], ModuleSpec], ...], ignore: tuple[str, ...]
) -> ModuleSpec | None:
    """The group of a linear module as compressed-tensors' `apply_quantization_config` picks
    it: none when an `ignore` entry matches; else each target string stands for the last group
    listing it, and the most specific target matching the module wins: its exact name, then
    "re:" patterns (in sorted order), then the class "Linear"."""
    if any(_ct_name_match(module, name) for name in ignore):
        return None
    by_target = {t: spec for targets, spec in groups for t in targets}
    named = sorted(
        (t for t in by_target if _ct_name_match(module, t)), key=lambda t: ("re:" in t, t)
    )
    if named:
        return by_target[named[0]]
    return by_target.get("Linear")


def _ct_name_match(module: str, target: str) -> bool:
    """compressed-tensors' `match_name`: a "re:" pattern matched from the start of the
    name, or the name itself."""
    if target.startswith("re:"):
        return re.match(target[3:], module) is not None
    return module == target


def _ct_pattern(name: str, where: str) -> None:
    try:
        re.compile(name[3:])
    except re.error as err:
        raise CheckpointError(f"{where}: bad pattern {name!r} ({err})") from None


def _int_spec(
    method: str,
    bits: Any,
    group: Any,
    sym: Any,
    desc_act: Any,
    offset: int,
    where: str,
    fields: tuple[str, str, str] = ("bits", "group_size", "sym"),  # their names in the config
) -> ModuleSpec:
    bits_name, group_name, sym_name = fields
    if bits not in (4, 8) or isinstance(bits, bool):
        raise CheckpointError(f"{where}.{bits_name} {_show(bits)} is not supported (4, 8)")
    per_word = 32 // bits
    if not _is_int(group) or not (group == -1 or (group > 0 and group % per_word == 0)):
        raise CheckpointError(
            f"{where}.{group_name} {_show(group)} is not supported (-1, or a positive multiple "
            f"of {per_word} for {bits} bits)"
        )
    for name, value in ((sym_name, sym), ("desc_act", desc_act)):
        if not isinstance(value, bool):
            raise CheckpointError(f"{where}.{name} must be true or false, got {_show(value)}")
    return ModuleSpec(method, bits, group, sym, desc_act, zero_offset=offset)


def _override(
    spec: ModuleSpec, override: dict[str, Any], pattern: str, where: str = "quantization_config"
) -> ModuleSpec:
    merged = {
        "bits": spec.bits,
        "group_size": spec.group_size,
        "sym": spec.sym,
        "desc_act": spec.desc_act,
    }
    merged.update({k: v for k, v in override.items() if k in merged})
    return _int_spec(
        spec.method,
        merged["bits"],
        merged["group_size"],
        merged["sym"],
        merged["desc_act"],
        spec.zero_offset,
        f"{where}.dynamic[{pattern!r}]",
    )


def _excluded(module: str, patterns: tuple[str, ...]) -> bool:
    """transformers' `should_convert_module`, negated: a pattern that is a dotted prefix,
    a regex match from the start, or a suffix of the module name."""
    for key in patterns:
        try:
            if re.match(f"{key}\\.", module) or re.match(key, module):
                return True
        except re.error:
            pass
        if module.endswith(key):
            return True
    return False


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{where} must be a list of module names, got {_show(value)}")
    return tuple(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _show(value: Any) -> str:
    """A config value as it reads in JSON (strings quoted), cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
