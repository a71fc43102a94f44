"""Loading the configuration: defaults < a TOML file < environment variables < command-line flags.

See :mod:`voiceagent.config` for the precedence and the names."""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from voiceagent.config.schema import Config
from voiceagent.errors import ConfigError

__all__ = ["given_keys", "load_config"]

T = TypeVar("T")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NUMBERS: dict[type, tuple[str, tuple[type, ...]]] = {
    # TOML's 2.7 or true is not an integer (int() would truncate), nor is true a number.
    int: ("an integer", (bool, float)),
    float: ("a number", (bool,)),
}


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Convert ``value`` (from TOML, or a string from env/flags) to ``typ``."""

    def bad(what: str) -> ConfigError:
        return ConfigError(f"invalid configuration: {key} must be {what}, got {value!r}")

    if typ is bool:
        if isinstance(value, bool):
            return value
        word = value.lower() if isinstance(value, str) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise bad("a boolean")
    if typ is str:
        if isinstance(value, str):
            return value
        raise bad("a string")
    if typ in _NUMBERS:
        what, refused = _NUMBERS[typ]
        if isinstance(value, refused):
            raise bad(what)
        try:
            return typ(value)
        except (TypeError, ValueError):
            raise bad(what) from None
    raise ConfigError(f"invalid configuration: {key} has an unsupported type")  # pragma: no cover


def _build(cls: type[T], data: Mapping[str, Any], prefix: str) -> T:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"invalid configuration: unknown key {dotted}{hint}")
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            if not isinstance(value, Mapping):
                raise ConfigError(f"invalid configuration: {dotted} must be a table")
            kwargs[key] = _build(typ, value, f"{dotted}.")  # type: ignore[arg-type]
        else:
            kwargs[key] = _coerce(value, typ if not isinstance(typ, types.UnionType) else str, dotted)
    return cls(**kwargs)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _set_dotted(tree: dict[str, Any], dotted: str, value: str) -> None:
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        raise ConfigError(f"invalid configuration: empty key in {dotted!r}")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"invalid configuration: {dotted} is not inside a table")
    node[parts[-1]] = value


def _user_tree(file: str | Path | None, env: Mapping[str, str] | None, overrides: Mapping[str, str] | None) -> dict[str, Any]:
    """What the user set: the file, then the environment, then the flags (each winning over the last)."""
    env = os.environ if env is None else env
    tree: dict[str, Any] = {}
    path = file or env.get("VOICEAGENT_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                tree = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"configuration file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from None
    env_tree: dict[str, Any] = {}
    top_level = {f.name for f in dataclasses.fields(Config) if not dataclasses.is_dataclass(f.type)}
    top_level |= {"cache_dir", "log_level", "log_format", "log_transcripts", "profile"}
    for name, value in env.items():
        if not name.startswith("VOICEAGENT_"):
            continue
        rest = name[len("VOICEAGENT_") :].lower()
        # Only VOICEAGENT_<SECTION>__<KEY> and the top-level keys are configuration; other
        # VOICEAGENT_* variables (VOICEAGENT_CONFIG, test knobs) belong to someone else.
        if "__" in rest or rest in top_level:
            _set_dotted(env_tree, rest.replace("__", "."), value)
    tree = _merge(tree, env_tree)
    flag_tree: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(flag_tree, dotted, value)
    tree = _merge(tree, flag_tree)
    return tree


def given_keys(
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """The dotted keys the user set in the file, the environment or the flags (as
    :func:`load_config` reads them), whatever the profile: what a profile's choice must not touch."""

    def walk(node: Mapping[str, Any], prefix: str) -> list[str]:
        out: list[str] = []
        for key, value in node.items():
            out += walk(value, f"{prefix}{key}.") if isinstance(value, Mapping) else [f"{prefix}{key}"]
        return out

    return frozenset(walk(_user_tree(file, env, overrides), ""))


def load_config(
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Build the effective configuration.

    ``file``: a TOML file (else ``VOICEAGENT_CONFIG`` from ``env``, else none).  ``env``: the
    environment (default ``os.environ``).  ``overrides``: dotted keys to string values, from flags.
    """
    tree = _user_tree(file, env, overrides)
    profile = tree.get("profile", "")
    if isinstance(profile, str) and profile:
        from voiceagent.config.profiles import profile_tree

        tree = _merge(profile_tree(profile), tree)  # the user's own settings win over the profile's
    try:
        return _build(Config, tree, "")
    except TypeError as exc:  # pragma: no cover - _build checks names first
        raise ConfigError(f"invalid configuration: {exc}") from None
