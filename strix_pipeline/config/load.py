"""Reading the configuration: which file (``$STRIX_CONFIG``, ``./strix.toml``, the embedded default),
parsed and checked against the schema, its problems listed by key path."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from strix_pipeline.config.hosts import HOST_KINDS
from strix_pipeline.config.rules import ConfigError
from strix_pipeline.config.strix import StrixConfig

# The embedded default ships inside the package, so a non-editable install finds it anywhere;
# ./strix.toml in the working directory, or $STRIX_CONFIG, replaces it.
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "default.toml"
LOCAL_CONFIG = "strix.toml"


def config_path() -> Path:
    """``$STRIX_CONFIG``, else ``./strix.toml``, else the embedded default."""
    env = os.environ.get("STRIX_CONFIG")
    if env:
        return Path(env)
    local = Path.cwd() / LOCAL_CONFIG
    return local if local.is_file() else DEFAULT_CONFIG


def _key_path(loc: tuple[int | str, ...]) -> tuple[str, str | None]:
    """The key path as the file spells it, and the host kind a host's key was read as: pydantic puts the
    kind of a host's table (its discriminator) into the path, ``hosts.<name>.<kind>.<key>``."""
    parts = [str(p) for p in loc if not str(p).startswith("function-after")]
    if len(parts) > 2 and parts[0] == "hosts" and parts[2] in HOST_KINDS:
        return ".".join(parts[:2] + parts[3:]), parts[2]
    return ".".join(parts), None


def _unknown_key(key: str, kind: str | None) -> str:
    """An extra key; on a host, whose key it is when the other kind has it."""
    others = [k for k, model in HOST_KINDS.items() if k != kind and key in model.model_fields]
    if kind is None or not others:
        return "unknown key"
    return f"unknown key: a key of hosts of kind {others[0]!r}, and this one is of kind {kind!r}"


def _problem(e: ErrorDetails, kind: str | None) -> tuple[str, str, object]:
    """What is wrong, the key it is under (a host's ``kind`` for its tag) and the value shown."""
    ctx = e.get("ctx") or {}
    if e["type"] == "extra_forbidden":
        return _unknown_key(str(e["loc"][-1]), kind), "", e.get("input")
    if e["type"] == "union_tag_not_found":  # a host's table without its `kind`
        return "Field required", ".kind", {}
    if e["type"] == "union_tag_invalid":
        kinds = " or ".join(repr(k) for k in HOST_KINDS)
        return f"Input should be {kinds}", ".kind", ctx.get("tag")
    return e["msg"], "", {} if e["type"] == "missing" else e.get("input")


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: invalid configuration ({err.error_count()} problem(s))"]
    for e in err.errors():
        loc, kind = _key_path(e["loc"])
        msg, key, value = _problem(e, kind)
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"  {(loc + key) or '<root>'}: {msg}{shown}")
    return "\n".join(lines)


def read_config(path: str | Path | None = None) -> StrixConfig:
    """The file checked against the schema (names, values, cross-references). What the engines make of it
    (the memory budget rule) is checked by ``config_load.load_config``, which every entry point uses."""
    path = Path(path) if path else config_path()
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    try:
        return StrixConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(path, e)) from None
