"""The shared warehouse (DuckLake: catalog in a real PostgreSQL on loopback, data files in a directory)
under concurrency: several real processes load, reload and query one warehouse at once.

Each test gets its own PostgreSQL database (and data directory) in the session's throwaway cluster
(``postgres`` fixture). The writers are separate Python processes, as two Dagster run workers or two
Boxes would be; each loads RunResults built like test_warehouse's, with thousands of request rows.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from conftest import need
from support.ducklake import CATALOG_ENV, strix_config
from support.infra import free_port
from support.paths import REPO, TESTS
from support.warehouse import T0, make_run, seed, view_names

from strix_pipeline.config import DEFAULT_CONFIG, DuckLakeTarget
from strix_pipeline.records import RunResult
from strix_pipeline.warehouse import RUN_TABLES, Warehouse, current_schema_version
from strix_pipeline.warehouse import connection as wconn
from strix_pipeline.warehouse.connection import CommitConflict, CommitRetry, in_transaction

pytestmark = pytest.mark.postgres  # the session's throwaway cluster: tests/conftest.py postgres

ROOT = REPO
REQUESTS_PER_LEVEL = 1500  # two sweep levels: 3000 request rows per run
RUNS_PER_WRITER = 3


@pytest.fixture
def lake(postgres, tmp_path: Path) -> DuckLakeTarget:
    db = postgres.create_database(f"lake_{uuid.uuid4().hex[:12]}")
    return DuckLakeTarget(
        catalog_dsn=postgres.dsn(db), data_path=tmp_path / "lake-data", catalog_env=CATALOG_ENV
    )


def run_for(host: str, i: int, requests_per_level: int = REQUESTS_PER_LEVEL) -> RunResult:
    """The run a writer process loads: deterministic, so the test knows every table's row count."""
    return make_run(
        f"{host}-run{i}",
        host=host,
        started_at=T0 + timedelta(hours=i),
        requests_per_level=requests_per_level,
    )


def expected_counts(result: RunResult) -> dict[str, int]:
    return {
        "runs": 1,
        "requests": len(result.requests),
        "aggregates": len(result.aggregates),
        "memory_samples": len(result.memory),
        "server_metrics": len(result.server_metrics),
        "quality_answers": len(result.quality),
    }


def counts_by_run(wh: Warehouse) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for table in RUN_TABLES:
        for run_id, n in wh.con.execute(f"SELECT run_id, count(*) FROM {table} GROUP BY run_id").fetchall():
            out.setdefault(run_id, dict.fromkeys(RUN_TABLES, 0))[table] = n
    return out


# ---- the writer process ---------------------------------------------------------------------------


def writer_main(spec: str) -> None:
    """Entry point of a writer process: load the runs of one host, each through its own open, as the
    pipeline does after each benchmark; print how many commit conflicts were retried."""
    s = json.loads(spec)
    retried: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            retried.append(record.getMessage())

    logging.getLogger(wconn.__name__).addHandler(Count())
    target = DuckLakeTarget(catalog_dsn=os.environ[CATALOG_ENV], data_path=Path(s["data_path"]))
    results = [run_for(s["host"], i, s["requests_per_level"]) for i in s["runs"]]
    print("ready", flush=True)
    go = Path(s["go"])
    deadline = time.monotonic() + 60
    while not go.exists():  # both writers start their loads together
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 60s")
        time.sleep(0.01)
    spans = []
    for r in results:
        t = time.time()
        with Warehouse.open(target) as wh:
            wh.load_run(r)
        spans.append((t, time.time()))
    print(json.dumps({"retried": len(retried), "spans": spans}), flush=True)


@dataclass
class Writer:
    proc: subprocess.Popen[str]

    def result(self, timeout: float = 240) -> dict:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"writer failed ({self.proc.returncode}):\n{err[-3000:]}"
        return json.loads(out.strip().splitlines()[-1])


def start_writer(
    lake: DuckLakeTarget, host: str, runs: list[int], go: Path, requests_per_level: int = REQUESTS_PER_LEVEL
) -> Writer:
    spec = json.dumps(
        {
            "host": host,
            "runs": runs,
            "data_path": str(lake.data_path),
            "go": str(go),
            "requests_per_level": requests_per_level,
        }
    )
    here = str(Path(__file__).resolve().parent)  # this module is the writer's entry point
    code = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(TESTS)!r}, {here!r}]; "
        "import test_ducklake; test_ducklake.writer_main(sys.argv[1])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, CATALOG_ENV: lake.catalog_dsn},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the child prints it once its runs are built (a few seconds)
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"writer did not start: {line!r} {proc.communicate(timeout=30)[1][-3000:]}")
    return Writer(proc)


def overlapped(a: list[list[float]], b: list[list[float]]) -> bool:
    return min(x[1] for x in a + b) > max(a[0][0], b[0][0]) and any(
        s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b
    )


# ---- one schema, the same behaviour -------------------------------------------------------------


def test_ducklake_has_the_file_schema_views_and_idempotent_loads(
    lake: DuckLakeTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Warehouse.open(tmp_path / "w.duckdb") as f, Warehouse.open(lake) as d:
        assert d.schema_version == f.schema_version == current_schema_version()
        assert d.table_names() == f.table_names()
        assert view_names(d) == view_names(f)
        for table in f.table_names():
            cols = (
                "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                f"WHERE table_name = '{table}' AND table_catalog = current_database() "
                "ORDER BY ordinal_position"
            )
            assert d.con.execute(cols).fetchall() == f.con.execute(cols).fetchall(), table
        for wh in (f, d):
            seed(wh)
            seed(wh)  # a reload of every run replaces it
            wh.upsert_host("strix-halo", "docker", "the Box")
            wh.upsert_host("strix-halo", None, "the Box, again")
        for table in f.table_names():
            if table == "schema_version":
                continue
            q = (
                f'SELECT * EXCLUDE (first_seen, last_seen) FROM "{table}" ORDER BY ALL'
                if table == "hosts"
                else (f'SELECT * FROM "{table}" ORDER BY ALL')
            )
            assert d.con.execute(q).fetchall() == f.con.execute(q).fetchall(), table
        # every view answers the same on both backends
        for view in view_names(f):
            q = f'SELECT * FROM "{view}" ORDER BY ALL'
            assert d.con.execute(q).fetchall() == f.con.execute(q).fetchall(), view
        assert d.count("hosts") == 1 and d.count("runs") == 5
        # a writer reaches no file once open (a stored view's SQL cannot either)
        assert d.con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
    # the two extensions came from their PyPI packages' files, never installed or fetched (asked of a
    # reader once the lake is attached and before it is sealed: listing them reads DuckDB's extension
    # folder, which neither a writer nor a reader reaches afterwards)
    exts: list[tuple[str, bool, bool]] = []
    seal = wconn.no_external_access

    def listed_then_sealed(con: duckdb.DuckDBPyConnection, *args: object, **kwargs: object) -> None:
        exts.extend(
            con.execute(
                "SELECT extension_name, loaded, installed FROM duckdb_extensions() "
                "WHERE extension_name IN ('ducklake', 'postgres_scanner') ORDER BY 1"
            ).fetchall()
        )
        seal(con, *args, **kwargs)

    monkeypatch.setattr(wconn, "no_external_access", listed_then_sealed)
    with Warehouse.open(lake, read_only=True) as r:
        assert exts == [("ducklake", True, False), ("postgres_scanner", True, False)]
        assert r.con.execute(
            "SELECT current_setting('autoinstall_known_extensions'), "
            "current_setting('autoload_known_extensions')"
        ).fetchall() == [(False, False)]


def test_reopening_a_current_ducklake_changes_nothing(lake: DuckLakeTarget) -> None:
    with Warehouse.open(lake) as wh:
        seed(wh)
        snapshots = wh.con.execute(f"SELECT count(*) FROM {wconn.LAKE}.snapshots()").fetchall()[0][0]
    with Warehouse.open(lake) as wh, Warehouse.open(lake, read_only=True) as r:
        assert r.count("requests") == 32
        # no migration, no view re-install: a writer's open commits nothing when there is nothing to do
        assert wh.con.execute(f"SELECT count(*) FROM {wconn.LAKE}.snapshots()").fetchall()[0][0] == snapshots


def test_read_only_open_of_an_empty_catalog_says_so(lake: DuckLakeTarget) -> None:
    from strix_pipeline.warehouse import WarehouseMissing

    with pytest.raises(WarehouseMissing, match="no data directory"):
        Warehouse.open(lake, read_only=True)


# ---- concurrency --------------------------------------------------------------------------------


def test_two_hosts_loading_at_once_lose_nothing_and_duplicate_nothing(
    lake: DuckLakeTarget, tmp_path: Path
) -> None:
    with Warehouse.open(lake):
        pass  # the schema exists before the writers race (a first-open race is its own test)
    go = tmp_path / "go"
    runs = list(range(RUNS_PER_WRITER))
    a = start_writer(lake, "box-a", runs, go)
    b = start_writer(lake, "box-b", runs, go)
    go.touch()
    ra, rb = a.result(), b.result()
    assert overlapped(ra["spans"], rb["spans"]), (ra["spans"], rb["spans"])  # they really wrote at once
    with Warehouse.open(lake, read_only=True) as wh:
        got = counts_by_run(wh)
        want = {f"{h}-run{i}": expected_counts(run_for(h, i)) for h in ("box-a", "box-b") for i in runs}
        assert got == want
        assert sum(c["requests"] for c in got.values()) == 2 * RUNS_PER_WRITER * 2 * REQUESTS_PER_LEVEL
        # no duplicated request: (run, level, index) is unique
        dup = wh.con.execute(
            "SELECT count(*) FROM (SELECT run_id, scenario, level, request_index FROM requests "
            "GROUP BY ALL HAVING count(*) > 1)"
        ).fetchall()[0][0]
        assert dup == 0
        hosts = wh.query_df("SELECT name, first_seen, last_seen FROM hosts ORDER BY name").to_dicts()
        assert [h["name"] for h in hosts] == ["box-a", "box-b"]
        assert all(h["last_seen"] == T0 + timedelta(hours=RUNS_PER_WRITER - 1) for h in hosts)
    print(f"commit conflicts retried: box-a {ra['retried']}, box-b {rb['retried']}")


def test_a_reload_replaces_its_run_while_another_writer_is_active(
    lake: DuckLakeTarget, tmp_path: Path
) -> None:
    with Warehouse.open(lake) as wh:
        wh.load_run(run_for("box-a", 0))
        assert wh.count("requests", "box-a-run0") == 2 * REQUESTS_PER_LEVEL
    go = tmp_path / "go"
    other = start_writer(lake, "box-b", list(range(RUNS_PER_WRITER)), go)
    # the reload: the same run id with a different shape (fewer requests), loaded by another process
    reload = start_writer(lake, "box-a", [0], go, requests_per_level=700)
    go.touch()
    ro, rr = other.result(), reload.result()
    assert overlapped(ro["spans"], rr["spans"]), (ro["spans"], rr["spans"])
    with Warehouse.open(lake, read_only=True) as wh:
        got = counts_by_run(wh)
        assert got["box-a-run0"] == expected_counts(run_for("box-a", 0, 700))  # replaced, not merged
        for i in range(RUNS_PER_WRITER):
            assert got[f"box-b-run{i}"] == expected_counts(run_for("box-b", i))
        assert len(got) == 1 + RUNS_PER_WRITER


def strix_script() -> Path:
    script = Path(sys.executable).parent / "strix"
    need(
        script.exists(),
        f"the strix console script beside {sys.executable}",
        "pip install -e . (make test does this)",
    )
    return script


def strix_query(config: Path, lake: DuckLakeTarget, sql: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(strix_script()),
            "--config",
            str(config),
            "query",
            sql,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, CATALOG_ENV: lake.catalog_dsn},
    )


def test_strix_query_reads_whole_runs_while_two_writers_load(lake: DuckLakeTarget, tmp_path: Path) -> None:
    config = strix_config(tmp_path, lake)
    with Warehouse.open(lake):
        pass
    go = tmp_path / "go"
    runs = list(range(RUNS_PER_WRITER))
    writers = [start_writer(lake, h, runs, go) for h in ("box-a", "box-b")]
    go.touch()
    # Each query joins runs with their request counts: a run is either absent or whole, never half
    # loaded, and what one query saw the next one still sees (snapshots only grow here).
    sql = (
        "SELECT r.run_id, (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) AS requests, "
        "(SELECT count(*) FROM aggregates a WHERE a.run_id = r.run_id) AS aggregates FROM runs r ORDER BY 1"
    )
    seen: list[list[dict]] = []
    asked: list[tuple[float, float]] = []  # each query's start and end
    deadline = time.monotonic() + 180
    while any(w.proc.poll() is None for w in writers) and time.monotonic() < deadline and len(seen) < 12:
        t = time.time()
        out = strix_query(config, lake, sql)
        assert out.returncode == 0, out.stderr
        seen.append(json.loads(out.stdout))
        asked.append((t, time.time()))
    results = [w.result() for w in writers]
    final = strix_query(config, lake, sql)
    assert final.returncode == 0, final.stderr
    seen.append(json.loads(final.stdout))
    whole = {"requests": 2 * REQUESTS_PER_LEVEL, "aggregates": len(run_for("box-a", 0).aggregates)}
    for rows in seen:
        for row in rows:
            assert {k: row[k] for k in whole} == whole, row
    for before, after in zip(seen, seen[1:], strict=False):
        assert {r["run_id"] for r in before} <= {r["run_id"] for r in after}
    assert len(seen[-1]) == 2 * RUNS_PER_WRITER
    # the reads ran while both writers were loading: some query's time overlaps the span in which
    # both had started their first load and neither had finished its last
    both = (max(r["spans"][0][0] for r in results), min(r["spans"][-1][1] for r in results))
    assert both[0] < both[1], results
    assert any(s < both[1] and e > both[0] for s, e in asked), (asked, both)


def test_writers_opening_a_new_warehouse_at_once_migrate_it_once(
    lake: DuckLakeTarget, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    writers = [start_writer(lake, h, [0], go, requests_per_level=50) for h in ("box-a", "box-b")]
    go.touch()
    for w in writers:
        w.result()
    with Warehouse.open(lake, read_only=True) as wh:
        versions = [r[0] for r in wh.con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()]
        assert versions == list(range(1, current_schema_version() + 1))
        assert wh.count("schema_meta") == 1
        assert sorted(wh.run_ids()) == ["box-a-run0", "box-b-run0"]


# ---- the retry policy ---------------------------------------------------------------------------


def _conflicting_update(lake: DuckLakeTarget) -> None:
    """Another writer changes the host row and commits (a logical conflict with any open
    transaction that changes the hosts table)."""
    with Warehouse.open(lake) as other:
        other.upsert_host("box-a", "docker", f"changed by the other writer at {time.time()}")


def test_a_conflicting_commit_runs_the_transaction_again(lake: DuckLakeTarget) -> None:
    with Warehouse.open(lake) as wh:
        wh.upsert_host("box-a", "docker", "first")
        attempts: list[int] = []

        def work() -> int:
            attempts.append(1)
            n = wh.con.execute("UPDATE hosts SET description = 'mine' WHERE name = 'box-a'").fetchall()[0][0]
            if len(attempts) == 1:
                _conflicting_update(lake)  # lands between this transaction's start and its commit
            return n

        retried: list[int] = []
        assert in_transaction(wh.con, work, on_retry=lambda n, e: retried.append(n)) == 1
        assert len(attempts) == 2 and retried == [1]
        assert wh.query_df("SELECT description FROM hosts")["description"].to_list() == ["mine"]


def test_the_retries_are_bounded_and_a_lost_transaction_keeps_nothing(lake: DuckLakeTarget) -> None:
    with Warehouse.open(lake) as wh:
        wh.upsert_host("box-a", "docker", "first")
        attempts: list[int] = []

        def work() -> None:
            attempts.append(1)
            wh.con.execute("UPDATE hosts SET description = 'mine' WHERE name = 'box-a'").fetchall()
            wh.con.execute("INSERT INTO registry_errors VALUES ('r', 'x', 'kept?', now())").fetchall()
            _conflicting_update(lake)  # every attempt loses

        t = time.monotonic()
        with pytest.raises(CommitConflict, match="conflicted with this one 3 times"):
            in_transaction(wh.con, work, retry=CommitRetry(attempts=3, first_wait_s=0.05))
        assert len(attempts) == 3
        assert time.monotonic() - t < 30
        assert wh.count("registry_errors") == 0
        assert "changed by the other writer" in wh.query_df("SELECT description FROM hosts")["description"][0]


def test_a_failure_that_is_not_a_conflict_is_not_retried(lake: DuckLakeTarget) -> None:
    with Warehouse.open(lake) as wh:
        attempts: list[int] = []

        def work() -> None:
            attempts.append(1)
            wh.con.execute("SELECT * FROM no_such_table").fetchall()

        with pytest.raises(duckdb.CatalogException):
            in_transaction(wh.con, work)
        assert len(attempts) == 1


# ---- the configuration ----------------------------------------------------------------------------


def test_the_config_chooses_the_backend_and_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strix_pipeline.config import ConfigError
    from strix_pipeline.config_load import load_config

    base = DEFAULT_CONFIG.read_text()
    section = '[warehouse]\nbackend = "duckdb"\n'

    def config(warehouse: str) -> Path:
        p = tmp_path / f"c{abs(hash(warehouse))}.toml"
        p.write_text(base.replace(section, warehouse))
        return p

    assert load_config(DEFAULT_CONFIG).warehouse_target() == load_config(DEFAULT_CONFIG).warehouse_path()
    with pytest.raises(ConfigError, match=r"warehouse: .*needs catalog_env and data_path"):
        load_config(config('[warehouse]\nbackend = "ducklake"\n'))
    with pytest.raises(ConfigError, match=r"warehouse: .*are for backend \"ducklake\""):
        load_config(config('[warehouse]\nbackend = "duckdb"\ndata_path = "x"\n'))
    with pytest.raises(ConfigError, match=r"warehouse.backend: .*got 'sqlite'"):
        load_config(config('[warehouse]\nbackend = "sqlite"\n'))
    lake = config(f'[warehouse]\nbackend = "ducklake"\ncatalog_env = "{CATALOG_ENV}"\ndata_path = "lake"\n')
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    with pytest.raises(ConfigError, match=rf"environment variable {CATALOG_ENV} is not set"):
        load_config(lake).warehouse_target()
    monkeypatch.setenv(CATALOG_ENV, "host=127.0.0.1 dbname=x password=s3cret")
    target = load_config(lake).warehouse_target()
    assert isinstance(target, DuckLakeTarget) and target.data_path == Path.cwd() / "lake"
    assert "s3cret" not in repr(target) and "s3cret" not in str(target)  # a secret is never shown


def test_an_unreachable_catalog_fails_clearly_without_showing_the_dsn(tmp_path: Path) -> None:

    from strix_pipeline.warehouse import WarehouseError

    dsn = f"host=127.0.0.1 port={free_port()} dbname=nope user=strix password=s3cret-pw connect_timeout=5"
    target = DuckLakeTarget(catalog_dsn=dsn, data_path=tmp_path / "lake", catalog_env=CATALOG_ENV)
    with pytest.raises(WarehouseError, match="cannot attach the DuckLake warehouse") as e:
        Warehouse.open(target)
    assert "s3cret-pw" not in str(e.value) and CATALOG_ENV in str(e.value)


def test_the_dagster_warehouse_resource_follows_the_config_to_the_lake(
    lake: DuckLakeTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strix_dagster.definitions import build_definitions
    from strix_pipeline.config_load import load_config

    config_file = strix_config(tmp_path, lake)
    defs = build_definitions(load_config(config_file), str(config_file))
    resource = defs.resources["warehouse"]
    assert lake.catalog_dsn not in repr(resource)  # the DSN stays out of the resource's config
    monkeypatch.setenv(CATALOG_ENV, lake.catalog_dsn)
    with resource.writer() as wh:
        wh.load_run(run_for("box-a", 0, 10))
    with Warehouse.open(lake, read_only=True) as wh:
        assert wh.run_ids() == ["box-a-run0"]
    with resource.reader() as wh:
        assert wh.count("requests") == 20
    monkeypatch.delenv(CATALOG_ENV)
    with pytest.raises(ValueError, match=f"{CATALOG_ENV} .*is not set"):
        resource.writer().__enter__()


def test_an_extension_missing_or_built_for_another_duckdb_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from strix_pipeline.warehouse import WarehouseError

    with pytest.raises(
        WarehouseError, match=r"needs the nope DuckDB extension: pip install duckdb-extension-nope=="
    ):
        wconn.extension_file("duckdb_extension_nope", "nope")
    found = wconn.extension_file("duckdb_extension_ducklake", "ducklake")
    assert found.is_file() and found.parent.name == f"v{duckdb.__version__}"
    monkeypatch.setattr(wconn.duckdb, "__version__", "9.9.9")
    with pytest.raises(WarehouseError, match=r"built for DuckDB v1\.5\.5, not the running 9\.9\.9"):
        wconn.extension_file("duckdb_extension_ducklake", "ducklake")


def test_two_first_inserts_of_one_host_at_once_are_folded_by_its_next_write(lake: DuckLakeTarget) -> None:
    # DuckLake has no unique key: two transactions inserting the same new host both commit.
    with Warehouse.open(lake) as a, Warehouse.open(lake) as b:
        sql = (
            "MERGE INTO hosts USING (SELECT 'box-a' AS name) s ON hosts.name = s.name "
            "WHEN NOT MATCHED THEN INSERT (name, kind) VALUES (s.name, 'docker')"
        )
        a.con.begin()
        a.con.execute(sql).fetchall()
        b.con.begin()
        b.con.execute(sql).fetchall()
        a.con.commit()
        b.con.commit()
        assert a.query_df("SELECT count(*) AS n FROM hosts WHERE name = 'box-a'")["n"][0] == 2
    with Warehouse.open(lake) as wh:
        wh.load_run(run_for("box-a", 0, 10))
        rows = wh.query_df("SELECT name, kind, kernel, first_seen FROM hosts").to_dicts()
        assert rows == [{"name": "box-a", "kind": "docker", "kernel": "6.17.0", "first_seen": T0}]


def test_a_fold_by_a_write_without_facts_keeps_the_facts(lake: DuckLakeTarget) -> None:
    """upsert_host folds a duplicated name but refreshes no facts: the folded row keeps those of the
    row seen last, instead of NULL until the host's next load."""
    with Warehouse.open(lake) as a, Warehouse.open(lake) as b:
        for con, kernel, seen in ((a.con, "6.16.0", "2026-11-01"), (b.con, "6.17.0", "2026-11-20")):
            con.begin()
            con.execute(
                "INSERT INTO hosts (name, kind, kernel, first_seen, last_seen) "
                "VALUES ('box-a', 'docker', ?, ?::TIMESTAMPTZ, ?::TIMESTAMPTZ)",
                [kernel, seen, seen],
            ).fetchall()
        a.con.commit()
        b.con.commit()
        assert a.query_df("SELECT count(*) AS n FROM hosts WHERE name = 'box-a'")["n"][0] == 2
    with Warehouse.open(lake) as wh:
        wh.upsert_host("box-a", "docker", "the Box")
        rows = wh.query_df("SELECT name, kind, description, kernel FROM hosts").to_dicts()
    assert rows == [{"name": "box-a", "kind": "docker", "description": "the Box", "kernel": "6.17.0"}]
