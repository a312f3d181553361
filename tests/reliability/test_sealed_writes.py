"""Sealed against writes, second round, each on a real DuckDB file or a real DuckLake on the PostgreSQL
test cluster:

1. ``strix query --out FILE --force``: a link to the warehouse swapped in while a real slow query runs
   is refused by name; the warehouse is untouched.
2. ``strix report --out DIR`` over an earlier report: a ``feed.xml`` linked to the warehouse and a
   ``runs/`` linked to another folder are refused by name; nothing is written or deleted through them.
3. A stored view that is not the project's (``v_run_base`` reading a local file) or a stored macro is
   refused by name before the report reads anything -- on a file and on a lake; a writer re-creates
   the project's views.
4. A result is bounded in rows and bytes (the memory it takes too) and said when cut; the time limit
   covers writing the output; nan, inf, sub-millisecond, huge and negative limits are refused.
5. ``strix import`` prints what the file says escaped; a 5,000-digit integer and a lone surrogate are
   refusals naming file, field and value.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from support.ducklake import planting_connection, report_lake
from support.report_seed import report_config, report_warehouse

from strix_pipeline.cli import common, main
from strix_pipeline.config import DEFAULT_CONFIG, ConfigError
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse, WarehouseError

STRIX = Path(sys.executable).parent / "strix"
PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
SECRET = "strix-local-secret-38c1"


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The report's seeded warehouse (three runs, a decision), the report's configuration."""
    monkeypatch.setattr(common, "load_config", lambda path=None: report_config())
    wh, _ = report_warehouse(tmp_path / "wh" / "w.duckdb")
    wh.close()
    return tmp_path / "wh" / "w.duckdb"


# ---- 1. a link swapped in while the query runs ------------------------------------------------------

# ~10^8 joined rows: seconds of DuckDB work, no sleep
SLOW = "SELECT count(*) AS n, sum((a.range * 7 + b.range) % 13) AS s FROM range(10000) a, range(12000) b"


def _opened(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fds / fd) == str(path) for fd in os.listdir(fds))
    except OSError:
        return False


def test_a_link_swapped_in_during_a_running_query_is_refused_and_the_warehouse_kept(
    seeded: Path, tmp_path: Path
) -> None:
    before = sha(seeded)
    out = tmp_path / "shared" / "result.csv"
    out.parent.mkdir()
    out.write_text("an earlier result\n")
    proc = subprocess.Popen(
        [
            str(STRIX),
            "query",
            SLOW,
            "--warehouse",
            str(seeded),
            "--format",
            "csv",
            "--out",
            str(out),
            "--force",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    swapped = threading.Event()

    def swap() -> None:
        # --out was checked before the warehouse was opened: once the query has it open, swap the file
        # for a link to the warehouse, as anyone who can write the shared folder can
        deadline = time.monotonic() + 60
        while not _opened(proc.pid, seeded.resolve()) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        tmp = out.with_name(".swap")
        tmp.symlink_to(seeded)
        os.replace(tmp, out)
        swapped.set()

    swapper = threading.Thread(target=swap)
    swapper.start()
    _, err = proc.communicate(timeout=300)
    swapper.join()
    assert swapped.is_set()
    assert proc.returncode == 1, err
    assert f"--out {out}" in err and "symbolic link" in err, err
    assert out.is_symlink() and sha(seeded) == before  # the link is left, the warehouse untouched
    with Warehouse.open(seeded, read_only=True) as wh:
        assert wh.count("runs") == 3


# ---- 2. the report over an earlier report ----------------------------------------------------------


def report(warehouse: Path, out: Path) -> int:
    return main(["report", "--warehouse", str(warehouse), "--out", str(out)])


def test_a_feed_linked_to_the_warehouse_is_refused_and_the_warehouse_kept(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    site = tmp_path / "site"
    assert report(seeded, site) == 0
    before = sha(seeded)
    (site / "feed.xml").unlink()
    (site / "feed.xml").symlink_to(seeded)
    capsys.readouterr()
    assert report(seeded, site) == 1
    err = capsys.readouterr().err
    assert f"{site / 'feed.xml'}: is a symbolic link" in err, err
    assert sha(seeded) == before and (site / "feed.xml").is_symlink()


def test_a_runs_folder_linked_elsewhere_is_refused_and_its_pages_kept(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    site = tmp_path / "site"
    assert report(seeded, site) == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.html").write_text("someone else's page")
    for page in (site / "runs").iterdir():
        page.unlink()
    (site / "runs").rmdir()
    (site / "runs").symlink_to(other, target_is_directory=True)
    capsys.readouterr()
    assert report(seeded, site) == 1
    err = capsys.readouterr().err
    assert f"{site / 'runs'}: is a symbolic link" in err, err
    assert (other / "keep.html").read_text() == "someone else's page" and os.listdir(other) == ["keep.html"]


def test_a_chart_file_linked_to_the_warehouse_is_refused(seeded: Path, tmp_path: Path) -> None:
    from strix_pipeline.analysis.charts import write_charts
    from strix_pipeline.safe_write import LinkRefused

    charts = tmp_path / "charts"
    charts.mkdir()
    (charts / "support_matrix.png").symlink_to(seeded)
    before = sha(seeded)
    with Warehouse.open(seeded, read_only=True) as wh, pytest.raises(LinkRefused, match="support_matrix.png"):
        write_charts(wh, charts, changes=[])
    assert sha(seeded) == before


def test_the_spool_and_an_export_write_through_no_link(seeded: Path, tmp_path: Path, capsys) -> None:
    from support.warehouse import make_run

    from strix_pipeline.safe_write import LinkRefused
    from strix_pipeline.warehouse.spool import spool_path, write_spool

    before = sha(seeded)
    spool = tmp_path / "spool"
    spool.mkdir()
    run = make_run("spooled")
    spool_path(spool, "spooled").symlink_to(seeded)
    with pytest.raises(LinkRefused, match="spooled"):
        write_spool(run, spool)
    export = tmp_path / "export"
    export.mkdir()
    (export / "runs.parquet").symlink_to(seeded)
    assert main(["export", "--parquet", str(export), "--warehouse", str(seeded)]) == 1
    assert f"{export / 'runs.parquet'}: is a symbolic link" in capsys.readouterr().err
    assert sha(seeded) == before


# ---- 3. stored views that are not the project's -----------------------------------------------------


def _plant(con: duckdb.DuckDBPyConnection, secret: Path) -> None:
    # the project's v_run_base with one more column: a local file's contents beside every run
    from strix_pipeline.warehouse.schema import views_sql

    base = views_sql().split("CREATE OR REPLACE VIEW v_run_base AS", 1)[1].split(";", 1)[0]
    evil = base.replace("r.run_id,", f"r.run_id || (SELECT content FROM read_text('{secret}')) AS run_id,", 1)
    assert evil != base
    con.execute(f"CREATE OR REPLACE VIEW v_run_base AS {evil}").fetchall()


def _site_text(site: Path) -> str:
    return (
        "".join(p.read_text(errors="replace") for p in site.rglob("*") if p.is_file())
        if site.exists()
        else ""
    )


def test_a_redefined_view_is_refused_by_name_on_a_file(seeded: Path, tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    with planting_connection(seeded) as con:
        _plant(con, secret)
    site = tmp_path / "site"
    assert report(seeded, site) == 1
    err = capsys.readouterr().err
    assert "the stored view v_run_base is not the project's definition" in err, err
    assert SECRET not in _site_text(site) and SECRET not in err
    with pytest.raises(WarehouseError, match="v_run_base"):
        Warehouse.open(seeded, read_only=True)
    # a writer is this code: it re-creates the project's views, and the report reads them again
    Warehouse.open(seeded).close()
    assert report(seeded, site) == 0 and SECRET not in _site_text(site)


def test_a_stored_macro_shadowing_a_builtin_is_refused_by_name(seeded: Path) -> None:
    with Warehouse.open(seeded) as wh:
        wh.con.execute("CREATE MACRO coalesce(a, b) AS 'planted'").fetchall()
    with pytest.raises(WarehouseError, match="macro coalesce"):
        Warehouse.open(seeded, read_only=True)


@pytest.fixture
def lake(postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return report_lake(postgres, tmp_path, monkeypatch, "views")


def test_a_redefined_view_is_refused_by_name_on_a_lake(lake, tmp_path: Path, capsys) -> None:
    target, config = lake
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    with planting_connection(target) as con:  # any Box's writer of the shared lake
        _plant(con, secret)
        assert SECRET in str(con.execute("SELECT run_id FROM v_run_base").fetchall())  # the plant works
    site = tmp_path / "site"
    assert main(["--config", str(config), "report", "--out", str(site)]) == 1
    err = capsys.readouterr().err
    assert "the stored view v_run_base is not the project's definition" in err, err
    assert SECRET not in _site_text(site) and SECRET not in err
    assert main(["--config", str(config), "query", "SELECT run_id FROM v_runs"]) == 1
    assert "v_run_base" in capsys.readouterr().err
    Warehouse.open(target).close()  # a writer re-creates the project's views
    assert main(["--config", str(config), "report", "--out", str(site)]) == 0
    assert SECRET not in _site_text(site)


# ---- 4. bounded results, a time limit over the output, refused limits -------------------------------


def query(path: Path, sql: str, *extra: str) -> int:
    return main(["query", sql, "--warehouse", str(path), "--lock-wait", "1", *extra])


def test_a_result_is_cut_at_max_rows_and_that_is_said(seeded: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "rows.csv"
    assert (
        query(
            seeded,
            "SELECT range AS i FROM range(50000)",
            "--format",
            "csv",
            "--out",
            str(out),
            "--max-rows",
            "12345",
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "result cut at 12,345 rows" in err and "max_rows" in err, err
    assert out.read_text().splitlines() == ["i", *map(str, range(12345))]
    # exactly the bound is whole: no cut said
    assert (
        query(seeded, "SELECT range AS i FROM range(12345)", "--format", "jsonl", "--max-rows", "12345") == 0
    )
    assert "cut" not in capsys.readouterr().err


def test_the_configuration_bounds_a_result(
    seeded: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "load_config", load_config)  # this test's file, not the report's config
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text() + '\n[query]\nmax_rows = 7\nmax_bytes = "1MB"\n')
    rc = main(
        [
            "--config",
            str(cfg),
            "query",
            "SELECT range FROM range(100)",
            "--warehouse",
            str(seeded),
            "--format",
            "csv",
        ]
    )
    out = capsys.readouterr()
    assert rc == 1 and out.out.splitlines() == ["range", *map(str, range(7))], out
    assert "result cut at 7 rows" in out.err


_PEAK_CODE = (
    "import sys\n"
    "from strix_pipeline.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child of a big pytest
    # process reports the parent's size; the high-water mark belongs to the new address space
    "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0].split()[1]\n"
    "print(hwm, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)
BIG_SQL = "SELECT range AS i, repeat('x', 1000) AS s FROM range(300000)"  # ~300 MB of result


def _peak(
    seeded: Path, max_bytes: str, target: Path, fmt: str = "csv"
) -> tuple[subprocess.CompletedProcess, float]:
    """`strix query BIG_SQL --out target` in a process of its own: (its outcome, its peak RSS in MB)."""
    argv = ["query", BIG_SQL, "--warehouse", str(seeded), "--format", fmt, "--out", str(target)]
    argv += ["--memory-limit", "50MB", "--max-bytes", max_bytes]
    clean_env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_CODE, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env,  # nothing an earlier test left in this process's environment
    )
    return done, int(done.stderr.strip().splitlines()[-1]) / 1024


def test_a_big_result_takes_bounded_memory_and_is_cut(seeded: Path, tmp_path: Path) -> None:
    """300 MB of result under --memory-limit 50MB took 1.8 GB: now it stops at --max-bytes."""
    out = tmp_path / "big.csv"
    done, cut_mb = _peak(seeded, "50MB", out)
    assert done.returncode == 1, done.stderr
    assert "result cut at" in done.stderr and "max_bytes" in done.stderr, done.stderr
    assert out.stat().st_size < 60e6, out.stat().st_size
    # the same query read whole holds clearly more (here ~0.75 GB against ~0.5 GB; the code before
    # took 1.8 GB for the cut one)
    whole, whole_mb = _peak(seeded, "2GB", tmp_path / "whole.csv")
    assert whole.returncode == 0 and "300000 rows" in whole.stderr, whole.stderr
    assert cut_mb < 0.85 * whole_mb and cut_mb < 900, (cut_mb, whole_mb)


# what a bounded result costs the process beyond a fixed part, per byte of --max-bytes: measured here
# ~1.1 for parquet, ~1.2 for csv (the result held once, written a chunk or row group at a time); the fixed
# part (the imports, DuckDB's own --memory-limit, a chunk of text being written) is measured with a
# BASE_CAP_MB cap, which already holds whole chunks (a 1 MB cap renders a tenth of one)
PEAK_PER_CAP_BYTE = 2.0
BASE_CAP_MB = 20


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_peak_memory_of_a_bounded_result_is_within_a_stated_factor_of_the_cap(
    seeded: Path, tmp_path: Path, fmt: str
) -> None:
    """peak RSS <= (peak at BASE_CAP_MB) + PEAK_PER_CAP_BYTE x (cap - BASE_CAP_MB), at two caps: the cap
    holds for the process, not only for the rows it keeps (the code before took 4-5x the result)."""
    base, base_mb = _peak(seeded, f"{BASE_CAP_MB}MB", tmp_path / f"base.{fmt}", fmt)
    assert base.returncode == 1 and "result cut at" in base.stderr, base.stderr
    peaks = {}
    for cap_mb in (100, 200):
        done, peaks[cap_mb] = _peak(seeded, f"{cap_mb}MB", tmp_path / f"cap{cap_mb}.{fmt}", fmt)
        assert done.returncode == 1 and "result cut at" in done.stderr, done.stderr
        limit = base_mb + PEAK_PER_CAP_BYTE * (cap_mb - BASE_CAP_MB) * 1e6 / 2**20
        assert peaks[cap_mb] <= limit, (fmt, cap_mb, peaks[cap_mb], base_mb)
    # and at the margin: another 100 MB of cap costs at most PEAK_PER_CAP_BYTE x 100 MB
    assert peaks[200] - peaks[100] <= PEAK_PER_CAP_BYTE * 100e6 / 2**20, (fmt, peaks, base_mb)


def test_the_time_limit_covers_writing_the_output(seeded: Path, tmp_path: Path, capsys) -> None:
    # an instant query whose markdown output takes far longer than the limit to make
    out = tmp_path / "slow.md"
    sql = "SELECT range AS i, range * 1.5 AS f, 'row ' || range AS s FROM range(900000)"
    started = time.monotonic()
    rc = query(seeded, sql, "--format", "markdown", "--out", str(out), "--timeout", "1")
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert rc == 1 and "--timeout of 1s" in err, err
    assert not out.exists() and took < 30, took
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e-9", "1e300", "-1"])
def test_an_unbounded_timeout_is_refused_at_the_command_line(seeded: Path, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        query(seeded, "SELECT 1", f"--timeout={value}")
    assert e.value.code == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["inf", "1e-9", "1e300"])
def test_an_unbounded_timeout_is_refused_in_the_configuration(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "strix.toml"
    cfg.write_text(DEFAULT_CONFIG.read_text() + f"\n[query]\ntimeout_s = {value}\n")
    with pytest.raises(ConfigError, match="query.timeout_s"):
        load_config(cfg)


# ---- 5. import ---------------------------------------------------------------------------------------


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "imp.duckdb"
    Warehouse.open(path).close()
    return path


def test_import_prints_what_the_file_says_escaped(warehouse: Path, tmp_path: Path, capsys) -> None:
    doc = json.loads((PEERS / "guidellm" / "benchmarks.json").read_text())
    doc["metadata"]["guidellm_version"] = "0.8.1\x1b]0;owned\x07\x1b[2J"
    src = tmp_path / "benchmarks.json"
    src.write_text(json.dumps(doc))
    scenario = "rand\x1b[31mom\u202e"
    assert main(["import", str(src), "--warehouse", str(warehouse), "--scenario", scenario]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out, out
    assert "\\x1b]0;owned\\x07" in out and "rand\\x1b[31mom\\u202e" in out, out


def _with(src: str, dst: Path, key_value: str) -> Path:
    """The fixture with one more top-level member, written as raw JSON text (no Python round trip)."""
    text = (PEERS / src).read_text()
    assert text.lstrip().startswith("{")
    dst.write_text("{" + key_value + ", " + text.lstrip()[1:])
    return dst


@pytest.mark.parametrize(
    ("member", "field", "says"),
    [
        (
            '"num_prompts_x": ' + "1" * 5000,
            "$.num_prompts_x",
            "an integer of 5000 digits (11111111111111111111…)",
        ),
        ('"note_x": "\\ud800"', "$.note_x", "'\\\\ud800' is refused: it is not Unicode text"),
    ],
    ids=["5000-digit integer", "lone surrogate"],
)
def test_unreadable_numbers_and_text_are_refused_naming_file_field_and_value(
    warehouse: Path, tmp_path: Path, capsys, member: str, field: str, says: str
) -> None:
    src = _with("vllm-bench/vllm-bench-serve.json", tmp_path / "bench.json", member)
    rc = main(["import", str(src), "--warehouse", str(warehouse), "--tool-version", "0.32.0"])
    err = capsys.readouterr().err
    assert rc == 1 and f"{src}: {field}: {says}" in err, err
    with Warehouse.open(warehouse, read_only=True) as wh:
        assert wh.count("runs") == 0


def test_export_reads_through_the_sandbox_and_imports_back(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`strix export` on a DuckDB file opens it as `strix query` does (no file reachable from SQL)
    and writes its Parquet files in Python; what it wrote imports into a new warehouse whole."""
    opens: list[dict] = []
    real = Warehouse.open.__func__  # type: ignore[attr-defined]

    def spy(cls: type, *args: object, **kwargs: object) -> Warehouse:
        opens.append(kwargs)
        return real(cls, *args, **kwargs)

    out = tmp_path / "export"
    with monkeypatch.context() as m:
        m.setattr(Warehouse, "open", classmethod(spy))
        assert main(["export", "--parquet", str(out), "--warehouse", str(seeded)]) == 0
    assert [k.get("sandbox") for k in opens] == [True]
    fresh = tmp_path / "fresh.duckdb"
    Warehouse.open(fresh).close()
    assert main(["import", "--parquet", str(out), "--warehouse", str(fresh)]) == 0
    with Warehouse.open(seeded, read_only=True) as a, Warehouse.open(fresh, read_only=True) as b:
        for table in ("runs", "requests", "aggregates", "decisions"):
            assert a.count(table) == b.count(table) > 0, table
