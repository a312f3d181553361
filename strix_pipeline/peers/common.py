"""What every peer-tool reader shares: the refusal, typed field access, and the run a file becomes.

A peer file becomes ONE run (``RunResult``) with aggregates only (no per-request rows: the tools'
summaries are what they printed). Its ``harness_version`` -- one of
:data:`~strix_pipeline.fingerprint.COMPARABILITY_FIELDS` -- is ``"<tool> <version>"`` (e.g.
``"vllm-bench 0.32.0"``), so a peer's fingerprint differs from any strix run's and its numbers never
join a strix series; ``suite`` is the tool's name and ``profile`` is ``"import"``. The run id is the
tool's name and a hash of the file's bytes, so importing the same file twice replaces the first load.

Every reader checks the fields it uses before it builds anything: a missing field, a value of the wrong
type or a structure it does not know raises :class:`PeerFormatError` naming the file and the field
(``$.benchmarks[0].metrics.time_to_first_token_ms.successful.median``), and nothing is loaded. So
does a value the import rules refuse (:data:`~strix_pipeline.records.VALUE_RULES`: a negative
duration, latency or throughput, a concurrency of 0), a number beyond ±2^53 (no measurement is that
large, and it would overflow the times and counts built from it), a file larger than
:data:`MAX_FILE_BYTES` (refused before it is read) and JSON nested deeper than Python's parser goes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.records import LevelAggregate, RunRecord, RunResult, refused_value
from strix_pipeline.units import MIB

# The largest peer file read: the tools' summaries are kilobytes (GuideLLM's, with its sampled
# requests, ~100 KiB); a file this large is not one, and reading it would hold all of it in memory.
MAX_FILE_BYTES = 64 * MIB
# The largest magnitude of a number read from a peer file: integers up to here are exact in a double,
# and times, counts and levels built from it stay inside datetime's and int64's ranges.
MAX_NUMBER = 2.0**53


class PeerFormatError(ValueError):
    """A peer file this module will not load: it names the file and the field that is wrong."""

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        self.path = str(path)
        self.field = field
        self.problem = problem
        super().__init__(f"{path}: {field}: {problem}")


@dataclass(frozen=True)
class ImportOptions:
    """What a peer file does not say about itself, given by the person importing it.

    ``None`` means "take it from the file" (and refuse where the file does not say and the field is
    needed: a tool's version most of all)."""

    host: str = "adhoc"  # strix bench --save uses "adhoc" too, so the two sit side by side in v_compare
    engine: str | None = None  # e.g. "llamacpp"; default: what the file says, else "unknown"
    model: str | None = None
    quantization: str | None = None
    tool_version: str | None = None  # required where the file does not record it (vLLM's result JSON)
    scenario: str | None = None  # the scenario name the levels get (default: per tool)
    run_id: str | None = None


class Field:
    """Typed reads of one JSON document, each failure naming the file and a JSONPath-like field."""

    def __init__(self, path: Path | str) -> None:
        self.path = path

    def fail(self, field: str, problem: str) -> PeerFormatError:
        return PeerFormatError(self.path, field, problem)

    def obj(self, doc: Any, key: str, where: str = "$") -> Mapping[str, Any]:
        v = self.get(doc, key, where)
        if not isinstance(v, Mapping):
            raise self.fail(f"{where}.{key}", f"expected an object, got {_kind(v)}")
        return v

    def arr(self, doc: Any, key: str, where: str = "$", *, nonempty: bool = True) -> Sequence[Any]:
        v = self.get(doc, key, where)
        if not isinstance(v, list):
            raise self.fail(f"{where}.{key}", f"expected a list, got {_kind(v)}")
        if nonempty and not v:
            raise self.fail(f"{where}.{key}", "is empty")
        return v

    def get(self, doc: Any, key: str, where: str = "$") -> Any:
        if not isinstance(doc, Mapping):
            raise self.fail(where, f"expected an object, got {_kind(doc)}")
        if key not in doc:
            raise self.fail(f"{where}.{key}", "missing")
        return doc[key]

    def num(self, doc: Any, key: str, where: str = "$", *, null: bool = False) -> float | None:
        """A finite number (``null`` allowed only when ``null``); NaN/inf and booleans are refused."""
        v = self.get(doc, key, where)
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(
                f"{where}.{key}", f"expected {'a number or null' if null else 'a number'}, got {_kind(v)}"
            )
        if abs(v) > MAX_NUMBER:
            raise self.fail(f"{where}.{key}", f"{_kind(v)} is out of range (beyond ±2^53)")
        return float(v)

    def req_num(self, doc: Any, key: str, where: str = "$") -> float:
        v = self.num(doc, key, where)
        assert v is not None
        return v

    def opt_num(self, doc: Any, key: str, where: str = "$") -> float | None:
        """A number, null, or absent (None)."""
        if isinstance(doc, Mapping) and key not in doc:
            return None
        return self.num(doc, key, where, null=True)

    def count(self, doc: Any, key: str, where: str = "$") -> int:
        v = self.get(doc, key, where)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(f"{where}.{key}", f"expected a count (a whole number >= 0), got {_kind(v)}")
        if v > MAX_NUMBER:
            raise self.fail(f"{where}.{key}", f"{_kind(v)} is out of range (beyond 2^53)")
        return v

    def text(self, doc: Any, key: str, where: str = "$", *, null: bool = False) -> str | None:
        v = self.get(doc, key, where)
        if v is None and null:
            return None
        if not isinstance(v, str):
            raise self.fail(f"{where}.{key}", f"expected a string, got {_kind(v)}")
        return v

    def req_text(self, doc: Any, key: str, where: str = "$") -> str:
        v = self.text(doc, key, where)
        assert v is not None
        return v


@dataclass(frozen=True)
class RecordedVersion:
    """Where a tool's file records the tool's version, and the versions its reader knows."""

    keys: tuple[str, ...]  # from the document's root, e.g. ("metadata", "guidellm_version")
    supported: tuple[str, ...]  # major.minor versions, e.g. ("0.8",)
    tool: str  # the tool's name in messages, e.g. "GuideLLM"
    file: str  # what the file is, e.g. "benchmarks JSON"

    def read(self, path: Path, opts: ImportOptions) -> tuple[Any, Field, str]:
        """The file's JSON, a reader of its fields, and the tool version it records. A ``--tool-version``
        that says otherwise is refused, not obeyed; so is a version whose major.minor the reader does not
        know."""
        doc = read_json(path)
        f = Field(path)
        node, where = doc, "$"
        for key in self.keys[:-1]:
            node, where = f.obj(node, key, where), f"{where}.{key}"
        version = f.req_text(node, self.keys[-1], where)
        field = f"{where}.{self.keys[-1]}"
        if opts.tool_version is not None and opts.tool_version.strip() != version:
            raise f.fail(field, f"the file says {version!r}, --tool-version says {opts.tool_version!r}")
        if not version.startswith(tuple(v + "." for v in self.supported)):
            known = ", ".join(self.supported)
            raise f.fail(field, f"{self.tool} {version}: this reader knows the {known} {self.file}")
        return doc, f, version


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({json.dumps(v)})"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {v[:40]!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, Mapping):
        return "an object"
    return type(v).__name__


def read_bytes(path: Path) -> bytes:
    """The file's bytes, refused unread when it is larger than :data:`MAX_FILE_BYTES`."""
    too_large = PeerFormatError(
        path, "$", f"larger than the {MAX_FILE_BYTES // 2**20} MiB a peer result file may be; not read"
    )
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise too_large
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)  # the file may have grown since the stat
    except OSError as e:
        raise PeerFormatError(path, "$", f"cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_FILE_BYTES:
        raise too_large
    return data


def read_text(path: Path) -> str:
    """The file as UTF-8 text (at most :data:`MAX_FILE_BYTES`), or a refusal naming the file."""
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise PeerFormatError(path, "$", f"not UTF-8 text ({e})") from None


class _LongInteger(str):
    """An integer literal longer than Python converts (sys.get_int_max_str_digits), kept as its digits
    so the refusal can name the field it is in."""


def _integer(digits: str) -> int | _LongInteger:
    if len(digits.lstrip("-")) > (sys.get_int_max_str_digits() or len(digits)):
        return _LongInteger(digits)
    return int(digits)


def _shown(s: str) -> str:
    # a value for the refusal: cut, every non-printable character escaped (a lone surrogate included)
    cut = s if len(s) <= 40 else s[:40] + "…"
    return ascii(cut)[1:-1] if not cut.isprintable() or _SURROGATE.search(cut) else cut


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_unreadable(path: Path, doc: Any, where: str) -> None:
    """A refusal naming the field of the first integer too long to read or string holding a lone
    surrogate (``"\\ud800"``: JSON lets it through, UTF-8 has no such character) in ``doc``."""
    stack: list[tuple[str, Any]] = [(where, doc)]
    while stack:  # no recursion: the document may be nested as deeply as the parser goes
        at, v = stack.pop()
        if isinstance(v, _LongInteger):
            raise PeerFormatError(
                path,
                at,
                f"an integer of {len(v.lstrip('-'))} digits ({v[:20]}…) is refused: no measurement is one",
            )
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise PeerFormatError(
                    path, at, f"{_shown(v)!r} is refused: it is not Unicode text (a lone surrogate)"
                )
        elif isinstance(v, dict):
            for k, item in reversed(v.items()):
                if _SURROGATE.search(k):
                    raise PeerFormatError(
                        path,
                        f"{at}.{_shown(k)}",
                        "the key is refused: it is not Unicode text (a lone surrogate)",
                    )
                stack.append((f"{at}.{k}", item))
        elif isinstance(v, list):
            stack.extend((f"{at}[{i}]", item) for i, item in reversed(list(enumerate(v))))


def parse_json(path: Path, text: str, where: str = "$") -> Any:
    """``json.loads`` whose failures are refusals naming the file (and ``where``: "line 3"); an integer
    too long to convert or a lone surrogate is refused naming its field."""
    try:
        doc = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno} column {e.colno}" if where == "$" else f"column {e.colno}"
        raise PeerFormatError(path, where, f"not JSON: {e.msg} at {at}") from None
    except RecursionError:
        # Python's parser recurses once per level: a deeply nested file exhausts the stack
        raise PeerFormatError(
            path, where, "JSON nested too deeply to read (no tool writes such a file)"
        ) from None
    _refuse_unreadable(path, doc, where)
    return doc


def read_json(path: Path) -> Any:
    """The file's one JSON document, or a refusal naming where it stops being JSON."""
    return parse_json(path, read_text(path))


def file_digest(path: Path) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


def checked_time(f: Field, field: str, make: Callable[[], datetime]) -> datetime:
    """A time built from the file's numbers, refused naming ``field`` when it falls outside the years
    a datetime holds."""
    try:
        return make()
    except (OverflowError, ValueError, OSError) as e:
        raise f.fail(field, f"not a time this reader can represent ({e})") from None


def parse_time(f: Field, value: Any, field: str) -> datetime:
    """An ISO 8601 time or a Unix time in seconds, as UTC (a naive ISO time is taken as UTC)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return checked_time(f, field, lambda: datetime.fromtimestamp(float(value), UTC))
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise f.fail(field, f"expected an ISO 8601 time, got {_kind(value)}") from None
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    raise f.fail(field, f"expected a time, got {_kind(value)}")


def level_for(*, max_concurrency: int | None, rate: float | None) -> tuple[int, str]:
    """(level, level_kind) as strix names its own levels: a closed loop by its concurrency, an open loop
    by its rate in requests per minute (``scenarios.random_dataset``)."""
    if rate is not None and math.isfinite(rate):
        return round(rate * 60), "rate"
    if max_concurrency is None:
        raise ValueError("a closed loop needs its concurrency")
    return max_concurrency, "concurrency"


def peer_result(
    path: Path,
    *,
    tool: str,
    version: str,
    opts: ImportOptions,
    model: str | None,
    started_at: datetime,
    ended_at: datetime | None,
    aggregates: Sequence[LevelAggregate],
    engine: str | None = None,
    quantization: str | None = None,
    engine_flags: Sequence[str] | None = None,
    engine_build: str | None = None,
    command: str | None = None,
) -> RunResult:
    """The run one peer file becomes (aggregates carry a placeholder run id; it is set here)."""
    if not aggregates:
        raise PeerFormatError(path, "$", f"no {tool} results in the file")
    for a in aggregates:  # the rules every import path applies, after the reader's own checks
        if (bad := refused_value(a)) is not None:
            name, value, must = bad
            raise PeerFormatError(
                path,
                f"{a.scenario} {a.level_kind} {a.level}: {name}",
                f"{value!r} is refused: {name} must be {must}",
            )
    run_id = opts.run_id or f"{tool}-{file_digest(path)[:16]}"
    kind = (opts.engine or engine or "unknown").strip().lower()
    run = RunRecord(
        run_id=run_id,
        host=opts.host,
        engine=kind,
        engine_kind=kind,
        image_repository=None,
        image_tag=None,
        image_digest=None,
        model_profile="adhoc",
        model=opts.model or model or "unknown",
        quantization=opts.quantization or quantization or "unknown",
        suite=tool,
        profile="import",
        fingerprint="",
        harness_version=f"{tool} {version}",  # a comparability field: the peer's series is its own
        engine_build=engine_build,
        launch_command=command,
        engine_flags=json.dumps(list(engine_flags)) if engine_flags else None,
        status="ok" if all(a.requests_failed == 0 for a in aggregates) else "partial",
        failure_reason=None,
        log_tail=None,
        started_at=started_at,
        ended_at=ended_at,
    )
    run.fingerprint = run_fingerprint(run)
    for a in aggregates:
        a.run_id = run_id
    return RunResult(run=run, aggregates=list(aggregates))


def first_line_json(path: Path) -> Any | None:
    """The first non-blank line parsed as JSON (for telling JSON Lines apart), or None."""
    try:
        for line in read_text(path).splitlines():
            if line.strip():
                return json.loads(line, parse_int=_integer)
    except (PeerFormatError, ValueError, RecursionError):
        return None
    return None
