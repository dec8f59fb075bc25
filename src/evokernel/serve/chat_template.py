"""Chat messages -> prompt text, with the checkpoint's own Jinja chat template.

    template = load_chat_template(model_dir, override=None)   # None when there is none
    text = template.render(messages, {"enable_thinking": False})

Where the template comes from, first found: `--chat-template FILE` (or `chatml`: the built-in
ChatML template with Qwen3's think block, model/templates/chatml.jinja, for checkpoints that
ship none; random checkpoints carry it in their tokenizer_config.json); `chat_template.jinja` in
the checkpoint; `chat_template` in its `tokenizer_config.json` (a string, or a list of named
templates, of which "default" is taken). It renders as transformers' `apply_chat_template`
renders it: a sandboxed Jinja environment (trim_blocks, lstrip_blocks, loop controls),
`raise_exception(msg)` and `strftime_now(fmt)` as globals, a `tojson` filter that keeps
non-ASCII text, `bos_token`/`eos_token` from the tokenizer config, `add_generation_prompt`
true, and the request's `chat_template_kwargs` as further variables (Qwen3's
`enable_thinking`). A template error is a `TemplateFailure` (the server answers 400).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evokernel.errors import ConfigError
from evokernel.model.tokenizer import CHATML

BUILT_IN = {"chatml": CHATML}
RESERVED = frozenset({"messages", "add_generation_prompt", "bos_token", "eos_token"})


class TemplateFailure(Exception):
    """The template refused or failed to render these messages (one line)."""


def _raise(message: str) -> None:
    raise TemplateFailure(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)


def _token(config: dict[str, Any], key: str) -> str:
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


@dataclass
class ChatTemplate:
    source: str
    origin: str  # where it was read from
    bos_token: str = ""
    eos_token: str = ""

    def __post_init__(self) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._compiled = env.from_string(self.source)
        except jinja2.TemplateError as err:
            raise ConfigError(f"{self.origin}: the chat template does not parse: {err}") from None

    @property
    def thinks(self) -> bool:
        """Whether answers may open with a think block (the template knows the tags)."""
        return "</think>" in self.source

    def render(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> str:
        try:
            return self._compiled.render(
                **kwargs,
                messages=messages,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateFailure:
            raise
        except Exception as err:  # Jinja reports template bugs and bad values alike
            raise TemplateFailure(f"{type(err).__name__}: {err}") from None


def load_chat_template(model_dir: Path, override: Path | None = None) -> ChatTemplate | None:
    config_path = model_dir / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"{config_path}: not readable JSON ({err})") from None
    tokens = {"bos_token": _token(config, "bos_token"), "eos_token": _token(config, "eos_token")}
    if override is not None:
        if str(override) in BUILT_IN:
            path = BUILT_IN[str(override)]
            return ChatTemplate(path.read_text(), f"built-in {override}", **tokens)
        return ChatTemplate(_read(override), str(override), **tokens)
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return ChatTemplate(_read(jinja_file), str(jinja_file), **tokens)
    source = config.get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if isinstance(source, str) and source:
        return ChatTemplate(source, f"{config_path} (chat_template)", **tokens)
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the chat template ({err})") from None
