"""The spool holds regular files only, read with `strix import`'s value rules, drained by one writer
at a time: a dangling link and a FIFO in the spool folder are moved aside with a message (they crashed
`strix load-spool` and every later `bench --save`, or hung it); a spool file with a NaN or a negative
duration is refused by name and moved aside, never loaded; while another writer drains the folder,
a second one loads none of it instead of racing it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.warehouse import make_run

from strix_pipeline.records import RequestTable, RunResult
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.spool import drain, pending, store_run, write_spool

STRIX = Path(sys.executable).parent / "strix"


def measured(run_id: str) -> RunResult:
    r = make_run(run_id, requests_per_level=5)
    r.requests = RequestTable(r.requests)
    return r


def load_spool(spool: Path, wh: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(STRIX), "load-spool", "--spool", str(spool), "--warehouse", str(wh), "--lock-wait", "1"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())


@pytest.mark.parametrize("kind", ["dangling link", "link to a spool file", "fifo"])
def test_a_link_or_fifo_in_the_spool_is_moved_aside_not_a_crash_or_a_hang(tmp_path: Path, kind: str) -> None:
    spool, wh = tmp_path / "spool", tmp_path / "w.duckdb"
    good = write_spool(measured("older"), spool)
    odd = spool / f"odd{'' if kind == 'fifo' else '-link'}.spool.arrow"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "dangling link":
        odd.symlink_to(tmp_path / "nowhere")
    else:
        elsewhere = write_spool(measured("elsewhere"), tmp_path / "other")
        odd.symlink_to(elsewhere)
    done = load_spool(spool, wh)  # a hang is the timeout's TimeoutExpired
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(odd) in done.stderr and "moved aside to" in done.stderr
    assert not good.exists() and not os.path.lexists(odd) and pending(spool) == []
    assert os.path.lexists(odd.with_name(odd.name + ".refused"))
    with Warehouse.open(wh, read_only=True) as r:
        assert r.run_ids() == ["older"]  # what a link points to is not loaded
    # and the next benchmark's store is not held up by it either
    report = store_run(measured("newer"), spool_directory=spool, open_writer=lambda: Warehouse.open(wh))
    assert report.drained.unreadable == []


@pytest.mark.parametrize(("field", "value"), [("ttft_p50_ms", math.nan), ("ttft_p50_ms", -5.0)])
def test_a_spool_file_with_a_refused_value_is_named_and_not_loaded(
    tmp_path: Path, field: str, value: float
) -> None:
    spool, wh = tmp_path / "spool", tmp_path / "w.duckdb"
    bad = measured("bad")
    setattr(bad.aggregates[0], field, value)
    path = write_spool(bad, spool)
    with Warehouse.open(wh) as w:
        report = drain(w, spool)
        assert w.run_ids() == []
    [(where, why)] = report.unreadable
    assert where == path and f"{field} = {value!r} is refused" in why and "moved aside to" in why
    assert pending(spool) == []


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_second_writer_does_not_drain_a_folder_another_is_draining(tmp_path: Path) -> None:
    spool, wh = tmp_path / "spool", tmp_path / "w.duckdb"
    path = write_spool(measured("older"), spool)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(spool)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with Warehouse.open(wh) as w:
            report = drain(w, spool)
        assert report.loaded == [] and report.unreadable == [] and path.exists()
    finally:
        holder.communicate("", timeout=10)
    with Warehouse.open(wh) as w:
        assert [rid for _, rid in drain(w, spool).loaded] == ["older"]
