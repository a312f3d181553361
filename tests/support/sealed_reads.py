"""What every connection a reader opened read through the stored views, with the view check taken away
(as a view that got past it would be): the rows, or DuckDB's refusal. Shared by the sealed-reader tests
of a DuckDB file and of a DuckLake."""

from __future__ import annotations

import duckdb
import pytest

from strix_pipeline.warehouse import facade


class Reads:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
        self.got: list[str] = []
        self.secret = secret
        monkeypatch.setattr(facade, "check_views", self.check)

    def check(self, con: duckdb.DuckDBPyConnection, where: object, *, writable: bool = False) -> None:
        assert not writable, "only readers here"
        for sql in ("SELECT run_id FROM v_runs", "SELECT * FROM hosts"):
            try:
                self.got.append(str(con.execute(sql).fetchall()))
            except duckdb.PermissionException as e:
                self.got.append(f"refused: {e}")
        # the store's own data still reads: the tables behind the views
        assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] > 0

    def assert_sealed(self) -> None:
        assert self.got, "the reader opened no connection"
        leaked = [g for g in self.got if self.secret in g]
        assert not leaked, f"a reader's connection read the file: {leaked[0][:200]}"
        assert any(g.startswith("refused:") and "disabled" in g for g in self.got), self.got
