"""Configuration sections: typed dataclasses built from parsed YAML, checked on construction.

Every section of the search's configuration (`config.py`, `llm/config.py`,
`mutators/config.py`) is a dataclass whose `__post_init__` checks its values with `require`:

    require(self.count >= 1, "count must be >= 1")

and `build_section(cls, data, where)` builds one from parsed YAML:

  * a key the dataclass does not declare is an error naming it (`unknown config key
    'islands.cuont'`);
  * each value must have its field's type: `int` (not bool, |x| < 2**63), `float` (an int is
    accepted; NaN and infinities are not), `str`, `bool`, `list[T]`, `dict[str, T]`,
    `T | None`, a nested section (built the same way; an empty YAML section means its
    defaults), or `Any`; a field without a default is required;
  * a failed `require` is re-raised with the section's path in front: a message starts with a
    key relative to its section, so `islands` + `count must be >= 1` reads
    `islands.count must be >= 1`.

Every error is a `ConfigError` (one line on the command line, exit 2).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, TypeVar

from evokernel.errors import ConfigError

T = TypeVar("T")
INT_LIMIT = 2**63  # what SQLite and JSON readers hold exactly


def require(ok: bool, msg: str) -> None:
    """Raise `ConfigError(msg)` unless `ok`; `msg` starts with the key, relative to its section."""
    if not ok:
        raise ConfigError(msg)


def build_section(cls: type[T], data: Any, where: str = "") -> T:
    """`cls` from parsed YAML `data` (a mapping, or None for the defaults); see the module doc."""
    if data is None:
        data = {}
    label = where or "the top level"
    require(isinstance(data, dict), f"{label}: expected a mapping, got {_show(data)}")
    hints = typing.get_type_hints(cls)
    declared = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in declared]
    for key in data:
        if key not in names:
            raise ConfigError(f"unknown config key '{_join(where, str(key))}'")
    for f in declared:
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if no_default and f.name not in data:
            raise ConfigError(f"{_join(where, f.name)} is required")
    kwargs = {k: _convert(hints[k], v, _join(where, k)) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(_join(where, str(err))) from None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _convert(tp: Any, value: Any, key: str) -> Any:
    """`value` as type `tp`, or ConfigError naming `key`."""
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build_section(tp, value, key)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[-1])
    if origin is list:
        require(isinstance(value, list), f"{key}: expected a list, got {_show(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        require(isinstance(value, dict), f"{key}: expected a mapping, got {_show(value)}")
        _, item = typing.get_args(tp)
        return {str(k): _convert(item, v, f"{key}.{k}") for k, v in value.items()}
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        require(ok, f"{key}: expected a number, got {_show(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        require(math.isfinite(number), f"{key}: expected a finite number, got {_show(value)}")
        return number
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        require(ok, f"{key}: expected an integer, got {_show(value)}")
        require(abs(value) < INT_LIMIT, f"{key}: {_show(value)} is out of range")
        return value
    require(isinstance(value, tp), f"{key}: expected {tp.__name__}, got {_show(value)}")
    return value
