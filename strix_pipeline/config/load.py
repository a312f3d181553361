"""Reading the configuration: which file (``$STRIX_CONFIG``, ``./strix.toml``, the embedded default),
parsed and checked against the schema, its problems listed by key path."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import ValidationError

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


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: invalid configuration ({err.error_count()} problem(s))"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        value = e.get("input")
        shown = "" if isinstance(value, dict) or e["type"] == "missing" else f" (got {value!r})"
        lines.append(f"  {loc or '<root>'}: {msg}{shown}")
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
