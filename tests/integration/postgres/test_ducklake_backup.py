"""`strix backup` of a DuckLake warehouse against a real PostgreSQL catalog: pg_dump (its DSN handed over
in libpq's environment) makes a custom-format copy of the catalog, restored into a new database it opens
beside the same data files with every run, and retention keeps the newest N."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from support.ducklake import CATALOG_ENV
from support.warehouse import make_run

from strix_pipeline.config import DuckLakeTarget
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.backup import backup, backups_of, dsn_env

pytestmark = pytest.mark.postgres


def test_the_catalog_copy_restores_to_the_same_warehouse_and_retention_keeps_the_newest(postgres, tmp_path):
    db = postgres.create_database(f"lake_{uuid.uuid4().hex[:12]}")
    lake = DuckLakeTarget(postgres.dsn(db), tmp_path / "lake-data", CATALOG_ENV)
    with Warehouse.open(lake) as wh:
        for i in range(2):
            wh.load_run(make_run(f"lake-backup-{i}"))
    to = tmp_path / "backups"
    made = []
    for _ in range(3):
        made.append(backup(lake, to, keep=2))
        time.sleep(0.01)
    assert backups_of(to, "ducklake-catalog", ".pgdump") == [m.path for m in made[1:]]
    assert made[1].removed == [] and made[2].removed == [made[0].path]
    restored = postgres.create_database(f"restored_{uuid.uuid4().hex[:12]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env |= dsn_env(postgres.dsn(restored))
    done = subprocess.run(
        [
            "pg_restore",
            "--no-owner",
            "--no-password",
            f"--dbname={env.pop('PGDATABASE')}",
            str(made[-1].path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    again = DuckLakeTarget(postgres.dsn(restored), Path(lake.data_path), CATALOG_ENV)
    with Warehouse.open(again, read_only=True) as wh:
        runs = wh.query_df("SELECT run_id FROM v_run_base ORDER BY run_id").to_dicts()
    assert runs == [{"run_id": "lake-backup-0"}, {"run_id": "lake-backup-1"}]
