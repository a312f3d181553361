"""The package index pip is configured with, resolved the way pip resolves it.

Host ``local`` installs its engines with pip, so its "registry" is whatever index pip would query:
reading that from pip's own configuration (never a host written here) keeps discovery and install on
the same index. pip's rules (files, sections, environment, names, default) as reproduced here:
docs/registry.md ("Which index: pip's configuration").
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

try:  # pip's own default index; without pip there is no default to follow (PipConfigError says so)
    from pip._internal.models.index import PyPI as _PIP_PYPI
except ImportError:  # pragma: no cover - the project venv always has pip
    _PIP_PYPI = None

__all__ = ["IndexSetting", "PipConfigError", "pip_config_files", "pip_index_url", "redact_url"]

_ENV_NAMES_IGNORED = ("version", "help")  # PIP_VERSION/PIP_HELP are not options (pip skips them)
_TRUE = ("1", "true", "yes", "on", "y", "t")


class PipConfigError(ValueError):
    """pip's configuration cannot be read, or names no index to list releases from."""


@dataclass(frozen=True)
class IndexSetting:
    """The index pip would query, and where that came from (for error messages and ``strix doctor``)."""

    url: str  # as configured: it may carry credentials, so show ``display`` instead
    source: str  # "PIP_INDEX_URL", "/etc/pip.conf [install] index-url", "pip's default"
    extra_index_urls: tuple[str, ...] = field(default=())  # pip also searches these; listed, not queried

    @property
    def display(self) -> str:
        return redact_url(self.url)


def redact_url(url: str) -> str:
    """``url`` without a password (``https://user:***@host/...``): index URLs may embed credentials."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _normalize_name(name: str) -> str:
    return name.lower().replace("_", "-").removeprefix("--")


def pip_config_files(environ: Mapping[str, str] | None = None, *, prefix: str | None = None) -> list[str]:
    """The configuration files pip reads, in the order it loads them (missing ones included)."""
    env = os.environ if environ is None else environ
    env_file = env.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    home = env.get("HOME") or os.path.expanduser("~")
    xdg_dirs = env.get("XDG_CONFIG_DIRS", "")
    xdg_home = env.get("XDG_CONFIG_HOME", "")
    dirs = (xdg_dirs if xdg_dirs.strip() else "/etc/xdg").split(os.pathsep)
    files = [os.path.join(d, "pip", "pip.conf") for d in dirs] + ["/etc/pip.conf"]
    if not (env_file and os.path.exists(env_file)):
        user_home = xdg_home if xdg_home.strip() else os.path.join(home, ".config")
        files += [os.path.join(home, ".pip", "pip.conf"), os.path.join(user_home, "pip", "pip.conf")]
    files.append(os.path.join(sys.prefix if prefix is None else prefix, "pip.conf"))
    if env_file:
        files.append(env_file)
    return files


def _read(path: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(section, name) -> (value, where) for one file; nothing when it does not exist."""
    if not os.path.exists(path):
        return {}
    parser = configparser.RawConfigParser()
    parser.optionxform = _normalize_name  # type: ignore[method-assign]  # pip's normalisation
    try:
        with open(path, encoding="utf-8") as fh:
            parser.read_file(fh, source=path)
    except (configparser.Error, UnicodeDecodeError, OSError) as e:
        raise PipConfigError(f"pip configuration file {path} cannot be read: {e}") from e
    return {
        (section, name): (value, f"{path} [{section}] {name}")
        for section in parser.sections()
        for name, value in parser.items(section)
    }


def _settings(environ: Mapping[str, str], prefix: str | None) -> dict[tuple[str, str], tuple[str, str]]:
    merged: dict[tuple[str, str], tuple[str, str]] = {}
    for path in pip_config_files(environ, prefix=prefix):
        merged.update(_read(path))
    for key, value in environ.items():
        if key.startswith("PIP_") and key[4:].lower() not in _ENV_NAMES_IGNORED:
            merged[(":env:", _normalize_name(key[4:]))] = (value, key)
    return merged


def _lookup(
    settings: dict[tuple[str, str], tuple[str, str]], command: str, name: str
) -> tuple[str, str] | None:
    for section in (":env:", command, "global"):  # pip: global < command < environment
        found = settings.get((section, name))
        if found and found[0].strip():
            return found[0].strip(), found[1]
    return None


def pip_index_url(
    command: str = "install", environ: Mapping[str, str] | None = None, *, prefix: str | None = None
) -> IndexSetting:
    """The index ``pip <command>`` would query here (see the module docstring for the rules)."""
    env = os.environ if environ is None else environ
    settings = _settings(env, prefix)
    no_index = _lookup(settings, command, "no-index")
    if no_index and no_index[0].lower() in _TRUE:
        raise PipConfigError(
            f"pip is configured with no-index ({no_index[1]}): it queries no package index, "
            "so there are no releases to list"
        )
    extra = _lookup(settings, command, "extra-index-url")
    extras = tuple(extra[0].split()) if extra else ()
    found = _lookup(settings, command, "index-url")
    if found:
        return IndexSetting(found[0], found[1], extras)
    if _PIP_PYPI is None:  # pragma: no cover
        raise PipConfigError("pip names no index-url and pip is not importable to ask for its default")
    return IndexSetting(_PIP_PYPI.simple_url, "pip's default", extras)
