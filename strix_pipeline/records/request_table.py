"""One request as the client saw it, and the run's requests kept column-ready for the warehouse's
bulk loads (:class:`RequestTable`)."""

from __future__ import annotations

import dataclasses
import operator
import typing
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, overload


@dataclass
class RequestRecord:
    """One request as the client saw it (table ``requests``). A failure is a row, never dropped."""

    run_id: str
    scenario: str
    level: int  # concurrency for a sweep, input tokens for the ladder, 0 for cold / 1 for warm, ...
    level_kind: str  # "concurrency" | "input_tokens" | "rate" | "phase" | "single"
    request_index: int
    warmup: bool
    sent_at: datetime  # wall clock, for people
    sent_offset_ms: float  # perf_counter offset from the start of the level, for arithmetic
    queue_ms: float  # time waiting for a client slot (closed loop) or behind schedule (open loop)
    ttfb_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    input_tokens: int | None
    input_tokens_estimated: bool
    output_tokens: int | None
    output_tokens_estimated: bool
    cached_tokens: int | None
    ok: bool
    error_class: str | None
    error_message: str | None
    event_offsets_ms: list[float] = field(default_factory=list)  # content events, from send
    event_tokens: list[int] = field(default_factory=list)  # tokens per content event when known, else []
    server_timings: str | None = None  # JSON of llama-server's `timings`, verbatim
    prompt_id: str | None = None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _request_column_kinds() -> dict[str, str]:
    # How RequestTable stores each field, from the dataclass's own type hints: the timestamp as int64
    # epoch microseconds, each list flattened into one typed array (array module typecodes), every
    # other field as it is.
    hints = typing.get_type_hints(RequestRecord)
    special = {datetime: "timestamp", list[float]: "list:d", list[int]: "list:q"}
    return {f.name: special.get(hints[f.name], "scalar") for f in dataclasses.fields(RequestRecord)}


REQUEST_COLUMN_KINDS = _request_column_kinds()
REQUEST_SCALAR_FIELDS = tuple(n for n, k in REQUEST_COLUMN_KINDS.items() if k == "scalar")
_LIST_KINDS = tuple((n, k[5:]) for n, k in REQUEST_COLUMN_KINDS.items() if k.startswith("list:"))
_LIST_FIELDS = tuple(n for n, _ in _LIST_KINDS)
(_TIME_FIELD,) = (n for n, k in REQUEST_COLUMN_KINDS.items() if k == "timestamp")
_GET_SCALARS = operator.attrgetter(*REQUEST_SCALAR_FIELDS)


class RequestTable(Sequence[RequestRecord]):
    """The requests of a run, kept ready for Arrow: what the load generator hands to the warehouse.

    The load generator appends each level's :class:`RequestRecord` rows when the level ends (off the
    timed path). ``append`` does the per-row Python work once, there: the scalar fields become one
    tuple, ``sent_at`` int64 microseconds since the epoch, and each list one flat typed array with
    per-row end offsets. At load time the warehouse then works on whole columns -- Arrow reads the
    tuples as one struct array, the typed arrays become Arrow buffers as they are -- instead of reading
    two dozen attributes from each of millions of objects, which was half the cost of a bulk load. A
    ``sent_at`` or list value of the wrong type is refused at ``append``, naming the field, and the
    table is left as it was; the scalar types are checked by the warehouse's explicit schema.

    Append-only. Reading rows back (indexing, iterating) builds new ``RequestRecord`` objects --
    copies, so changing one does not change the table -- with ``sent_at`` in UTC.
    """

    __slots__ = ("_scalars", "_times", "_values", "_ends")

    def __init__(self, rows: Iterable[RequestRecord] = ()) -> None:
        self._scalars: list[tuple[Any, ...]] = []
        self._times: array[int] = array("q")
        self._values: tuple[array[Any], ...] = tuple(array(kind) for _, kind in _LIST_KINDS)
        self._ends: tuple[array[int], ...] = tuple(array("q") for _ in _LIST_FIELDS)
        self.extend(rows)

    def append(self, row: RequestRecord) -> None:
        if type(row) is not RequestRecord:
            raise TypeError(f"RequestTable holds RequestRecord rows, not {type(row).__name__}")
        try:  # everything that can refuse a value, before anything is stored
            time_us = (getattr(row, _TIME_FIELD) - _EPOCH) // _MICROSECOND
            lists = [array(kind, getattr(row, name)) for name, kind in _LIST_KINDS]
        except (TypeError, OverflowError):
            raise TypeError(_bad_request_value(row)) from None
        self._scalars.append(_GET_SCALARS(row))
        self._times.append(time_us)
        for values, ends, part in zip(self._values, self._ends, lists, strict=True):
            values.extend(part)
            ends.append(len(values))

    def extend(self, rows: Iterable[RequestRecord]) -> None:
        for row in rows:
            self.append(row)

    def __iadd__(self, rows: Iterable[RequestRecord]) -> RequestTable:
        self.extend(rows)
        return self

    def __len__(self) -> int:
        return len(self._times)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...
    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"request {index} of a table of {n}")
        return self._row(index % n)

    def __iter__(self) -> Iterator[RequestRecord]:
        return map(self._row, range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"RequestTable({len(self)} requests)"

    def _row(self, i: int) -> RequestRecord:
        fields = dict(zip(REQUEST_SCALAR_FIELDS, self._scalars[i], strict=True))
        fields[_TIME_FIELD] = _EPOCH + timedelta(microseconds=self._times[i])
        for name, values, ends in zip(_LIST_FIELDS, self._values, self._ends, strict=True):
            fields[name] = values[ends[i - 1] if i else 0 : ends[i]].tolist()
        return RequestRecord(**fields)

    def scalar_rows(self) -> list[tuple[Any, ...]]:
        """The scalar fields of every row, one tuple each in ``REQUEST_SCALAR_FIELDS`` order (not a copy)."""
        return self._scalars

    def run_ids(self) -> list[str]:
        return list(map(_GET_RUN_ID, self._scalars))

    def times_us(self) -> array[int]:
        """``sent_at`` of every row as int64 microseconds since the epoch (not a copy)."""
        return self._times

    def list_column(self, name: str) -> tuple[array[Any], array[int]]:
        """A list column as (flat typed values, per-row end offsets), not a copy."""
        k = _LIST_FIELDS.index(name)
        return self._values[k], self._ends[k]


_GET_RUN_ID = operator.itemgetter(REQUEST_SCALAR_FIELDS.index("run_id"))


def _bad_request_value(row: RequestRecord) -> str:
    where = f"run {row.run_id!r}, {row.scenario} level {row.level!r}, request {row.request_index!r}"
    t = getattr(row, _TIME_FIELD)
    if not isinstance(t, datetime) or t.tzinfo is None:
        return f"RequestRecord.{_TIME_FIELD} must be a timezone-aware datetime, got {t!r} ({where})"
    for name, kind in _LIST_KINDS:
        value = getattr(row, name)
        try:
            array(kind, value)
        except (TypeError, OverflowError) as e:
            want = {"q": "a list of int64", "d": "a list of floats"}[kind]
            return f"RequestRecord.{name} must be {want}, got {value!r} ({e}; {where})"
    return f"RequestRecord has a value of the wrong type ({where})"
