"""Strict loading of nested frozen dataclasses from YAML mappings.

An unknown key, a missing required key or a value of the wrong type is an error that names the key's
full path (``optim.lr``). The dataclass's own ``__post_init__`` checks get the path prefixed too.
"""

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    pass


def _check(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _check(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {hint}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(_check(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
        items = [_check(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        # bool is an int in Python; a YAML `true` for a count is still a mistake
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {hint}")


def from_dict(cls: type, data: Any, where: str = "config") -> Any:
    """An instance of dataclass ``cls`` from ``data``, every key and type checked."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key; known keys are {sorted(fields)}")
    values = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _check(data[name], hints[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}: required key is missing")
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{where}: {e}") from e


def to_dict(obj: Any) -> Any:
    """A dataclass as plain YAML-able data (tuples become lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


class _Loader(yaml.SafeLoader):
    """YAML 1.2 floats: PyYAML (YAML 1.1) reads ``1e-6`` as a string, and every lr is written that way."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*)?(?:\.\d*)?[eE][-+]?\d+$|^[-+]?(?:\d[\d_]*)?\.\d+$|^[-+]?\d[\d_]*\.$"),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        return load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def flat_keys(data: dict, prefix: str = "") -> dict:
    """``{"optim": {"lr": 1}}`` → ``{"optim.lr": 1}``."""
    out = {}
    for k, v in data.items():
        out.update(flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def config_changes(path: Path, data: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """The keys in which ``data`` differs from the config stored at ``path`` ([] if none is stored)."""
    path = Path(path)
    if not path.exists():
        return []
    old = load_yaml(path.read_text(encoding="utf-8"))
    old, new = flat_keys(old if isinstance(old, dict) else {}), flat_keys(data)
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and not k.startswith(tuple(ignore)))


def pin_config(path: Path, data: dict, what: str, ignore: tuple[str, ...] = ()) -> None:
    """Write ``data`` to ``path``, or, if a config is already there, check it is the same one.

    A directory holds the outputs of one config: continuing it under another is an error that names
    the differing keys. Keys under a prefix in ``ignore`` (settings that change no output) may differ.
    """
    from pacs.io import atomic_write_text

    path = Path(path)
    differing = config_changes(path, data, ignore)
    if differing:
        raise ValueError(
            f"{path.parent} holds {what} with a different config ({path}); differing keys: {', '.join(differing)}; "
            "use a new --out, delete the old outputs, or pass --restart-on-change"
        )
    if not path.exists():
        atomic_write_text(path, dump_yaml(data))
