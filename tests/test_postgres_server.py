"""The throwaway PostgreSQL cluster the DuckLake and Dagster-instance tests stand on."""

from tests.postgres_server import Postgres


def test_cluster_answers_on_loopback_and_makes_databases(postgres: Postgres) -> None:
    name = postgres.create_database("strix_smoke")
    assert postgres.psql("SELECT current_database()", database=name) == "strix_smoke"
    assert postgres.psql("SHOW listen_addresses") == "127.0.0.1"
