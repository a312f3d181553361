"""The throwaway PostgreSQL cluster the DuckLake and Dagster-instance tests stand on."""

import pytest
from support.postgres_server import Postgres

pytestmark = pytest.mark.postgres  # the session's throwaway cluster: tests/conftest.py postgres


def test_cluster_answers_on_loopback_and_makes_databases(postgres: Postgres) -> None:
    name = postgres.create_database("strix_smoke")
    assert postgres.psql("SELECT current_database()", database=name) == "strix_smoke"
    assert postgres.psql("SHOW listen_addresses") == "127.0.0.1"
