"""Every read-only open of a DuckDB warehouse file that reads stored views or tables is sandboxed as
`strix query` is (``Warehouse.open_reader``), not only `decide`, `report`, `export` and `changes`.

The view check is the first wall (a stored view not the project's is refused by name). These tests take
it away -- as a view that ever got past it would -- and plant, in a scratch warehouse file, the
project's ``v_run_base`` redefined to read a local file, or a view ``"HOSTS"`` standing for the table
``hosts``. Then each reader runs (`strix history`, `strix plan`, `strix images list`, `strix run`'s
closing summary, `strix bisect`'s result, `strix compare`'s noise lines, `strix doctor`'s production
check, the runner's estimates, the Dagster launcher's and bisection driver's reads, the Dagster
resource's reader): every connection it opened reads the view and gets no file (DuckDB refuses it),
and nothing it prints or writes holds the file's contents.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import types
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from rich.console import Console
from support.report_seed import history_warehouse, report_config
from support.sealed_reads import Reads

from assets.resources import WarehouseResource
from strix_dagster import bisect_run
from strix_dagster import run as dagster_run
from strix_pipeline.cli import bisect as cli_bisect
from strix_pipeline.cli import compare as cli_compare
from strix_pipeline.cli import history as cli_history
from strix_pipeline.cli import main
from strix_pipeline.cli import plan as cli_plan
from strix_pipeline.cli import run as cli_run
from strix_pipeline.config import StrixConfig
from strix_pipeline.doctor import production as doctor_production
from strix_pipeline.runner.estimates import read_estimate
from strix_pipeline.warehouse import Warehouse, WarehouseLocked
from strix_pipeline.warehouse.schema import views_sql

SECRET = "strix-file-secret-7c2a"


def q(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "w.duckdb"
    wh, _ = history_warehouse(path)  # runs, decisions, changes and the bisection "b1"
    wh.close()
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_text(SECRET)
    return p


def _plant(path: Path, secret: Path, plant: str) -> None:
    con = duckdb.connect(str(path))
    try:
        if plant == "HOSTS":
            cols = [r[0] for r in con.execute("DESCRIBE hosts").fetchall()]
            con.execute("CREATE TABLE hosts_kept AS SELECT * FROM hosts").fetchall()
            con.execute("DROP TABLE hosts").fetchall()
            select = ", ".join(
                [f"(SELECT content FROM read_text({q(secret)})) AS {cols[0]}", *(f"h.{c}" for c in cols[1:])]
            )
            con.execute(f'CREATE VIEW "HOSTS" AS SELECT {select} FROM hosts_kept h').fetchall()
        else:
            base = views_sql().split("CREATE OR REPLACE VIEW v_run_base AS", 1)[1].split(";", 1)[0]
            evil = base.replace(
                "r.run_id,", f"r.run_id || (SELECT content FROM read_text({q(secret)})) AS run_id,", 1
            )
            assert evil != base
            con.execute("DROP VIEW v_run_base").fetchall()
            con.execute(f"CREATE VIEW v_run_base AS {evil}").fetchall()
        # the plant works for a connection that may read files
        got = str(con.execute("SELECT run_id FROM v_runs").fetchall())
        assert SECRET in got + str(con.execute("SELECT * FROM hosts").fetchall())
    finally:
        con.close()


def _config(path: Path) -> StrixConfig:
    cfg = report_config()
    return cfg.model_copy(update={"project": cfg.project.model_copy(update={"warehouse": str(path)})})


def _attempt(work: Callable[[], object]) -> str:
    """What the reader gave, or the error it raised (a refused view may stop it): as text."""
    try:
        return str(work())
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any end of the reader is examined the same way
        return f"{type(e).__name__}: {e}"


Reader = Callable[[Path, StrixConfig, Path, pytest.MonkeyPatch], str]


def _history(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    out = io.StringIO()
    got = _attempt(lambda: cli_history.print_history(Console(file=out), config, ["sha256:x"]))
    return got + out.getvalue()


def _plan(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    return _attempt(lambda: vars(cli_plan._read(argparse.Namespace(warehouse=str(path)), config)))


def _images_list(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    return _attempt(lambda: main(["images", "list", "--warehouse", str(path), "--all", "--json"]))


def _run_summary(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    def dagster_process(cmd: list[str], log: Path, verbose: bool = False) -> int:  # the Dagster run
        summary = Path(cmd[cmd.index("--summary") + 1])
        runs = [{"dagster_run_id": "dagster-run-1", "success": True, "partition": None}]
        summary.write_text(json.dumps({"runs": runs, "dagster_home": str(tmp / ".dagster")}))
        return 0

    mp.setattr(cli_run, "load_config", lambda path=None: config)
    mp.setattr(cli_run, "run_dagster", dagster_process)
    args = argparse.Namespace(config=str(tmp / "strix.toml"), partition=None, engine=None)
    return _attempt(lambda: cli_run.run(args))


def _bisect_result(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    class Opened(Warehouse):
        # the bisection is started by a writer, which would re-create the views: a sandboxed reader
        # stands in for it; the result's read-only open is the command's own
        @classmethod
        def open(cls, target: object, **kwargs: object) -> Warehouse:
            if kwargs.get("read_only"):
                return Warehouse.open(target, **kwargs)
            return Warehouse.open(target, read_only=True, sandbox=True)

    def start(wh: Warehouse, config: StrixConfig, **kwargs: object) -> object:
        b = next(x for x in wh.list_bisections() if x.bisection_id == "b1")
        return types.SimpleNamespace(bisection_id=b.bisection_id, status="found", reason="planted")

    mp.setattr(cli_bisect, "load_config", lambda path=None: config)
    mp.setattr(cli_bisect, "Warehouse", Opened)
    mp.setattr(cli_bisect, "start", start)
    args = argparse.Namespace(
        config=str(tmp / "strix.toml"),
        metric="ttft_p95_ms",
        scenario="concurrency_sweep",
        level=5,
        host=None,
        engine="llamacpp",
        between=["a", "b"],
        max_runs=4,
    )
    return _attempt(lambda: cli_bisect.bisect(args))


def _compare_noise(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    args = argparse.Namespace(warehouse=str(path), engine="llamacpp")
    return _attempt(lambda: cli_compare.noise_lines(args, config, None, {}, 8))  # type: ignore[arg-type]


def _doctor_production(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    read = types.SimpleNamespace(digest="sha256:" + "0" * 64, argv=["llama-server"])
    base = types.SimpleNamespace(backend="llamacpp", image_ref="img", model_on_host="/m")
    mp.setattr(doctor_production, "read_production", lambda *a: read)
    mp.setattr(doctor_production, "derive_baseline", lambda r: base)
    cfg = types.SimpleNamespace(production=types.SimpleNamespace(container="c", unit=None))
    checks = doctor_production._production
    return _attempt(lambda: list(checks(config, "box", cfg, None, None)))  # type: ignore[arg-type]


def _estimates(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    target = types.SimpleNamespace(host="box", engine="llamacpp", model="qwen3", profile="default")
    return _attempt(lambda: read_estimate(config, target))  # type: ignore[arg-type]


def _dagster_known_images(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    return _attempt(lambda: dagster_run.known_images(config))


def _dagster_bisection(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    return _attempt(lambda: bisect_run._get(config, "b1"))


def _resource_reader(path: Path, config: StrixConfig, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    def work() -> object:
        with WarehouseResource(path=str(path), lock_retry_s=1).reader() as wh:
            return wh.query_df("SELECT run_id FROM v_runs").to_dicts()

    return _attempt(work)


READERS: dict[str, Reader] = {
    "history": _history,
    "plan": _plan,
    "images-list": _images_list,
    "run-summary": _run_summary,
    "bisect-result": _bisect_result,
    "compare-noise": _compare_noise,
    "doctor-production": _doctor_production,
    "runner-estimates": _estimates,
    "dagster-known-images": _dagster_known_images,
    "dagster-bisection": _dagster_bisection,
    "resource-reader": _resource_reader,
}


def _files_text(root: Path, skip: Path) -> str:
    return "".join(
        p.read_bytes().decode(errors="replace")
        for p in root.rglob("*")
        if p.is_file() and p != skip and p.suffix not in (".duckdb", ".wal")
    )


@pytest.mark.parametrize("plant", ["v_run_base", "HOSTS"])
@pytest.mark.parametrize("reader", list(READERS), ids=list(READERS))
def test_a_reader_of_the_warehouse_file_reads_no_file_through_a_stored_view(
    template: Path,
    secret: Path,
    tmp_path: Path,
    plant: str,
    reader: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "wh" / "w.duckdb"
    path.parent.mkdir()
    shutil.copy(template, path)
    _plant(path, secret, plant)
    monkeypatch.chdir(tmp_path)
    reads = Reads(monkeypatch, SECRET)
    got = READERS[reader](path, _config(path), tmp_path, monkeypatch)
    out = capsys.readouterr()
    reads.assert_sealed()
    assert SECRET not in got + out.out + out.err
    assert SECRET not in _files_text(tmp_path, secret)


def test_a_writer_of_the_same_process_stores_between_sandboxed_readers(
    template: Path, tmp_path: Path
) -> None:
    # DuckDB shares one database instance per file and process, and the sandbox's settings (no external
    # access, no local file system, configuration locked) are the instance's: they must end with the
    # reader, so a process that reads, stores, then reads again (`strix run`'s Dagster process: the
    # images, the runs, the analysis) keeps a working writer.
    path = tmp_path / "w.duckdb"
    shutil.copy(template, path)
    with Warehouse.open_reader(path) as r:
        before = r.count("runs")
        with pytest.raises(duckdb.Error, match="disabled"):
            r.con.execute(f"SELECT content FROM read_text({q(path)})").fetchall()
        # a writer beside an open reader is refused, as beside any read-only open, never sandboxed
        with pytest.raises(WarehouseLocked):
            Warehouse.open(path, lock_retry_s=0.2)
    with Warehouse.open(path) as w:
        assert w.con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0] is False
        w.con.execute("DELETE FROM hosts").fetchall()  # a store: the writer writes
    with Warehouse.open_reader(path) as r:
        assert r.count("runs") == before and r.con.execute("SELECT count(*) FROM hosts").fetchall()[0][0] == 0
    with Warehouse.open(path) as w:
        w.con.execute("CHECKPOINT").fetchall()
