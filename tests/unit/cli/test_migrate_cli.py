"""`strix migrate`: after an upgrade, readers refuse the warehouse's older views until a writer opens
it; the command is that writer, alone, and says what it applied."""

from __future__ import annotations

import re
import warnings

from support.warehouse import create_at_version

from strix_pipeline.cli import main
from strix_pipeline.warehouse import schema as wschema

V21_COLUMN = re.compile(
    r"^\s+\S*(power_w|power_source|j_per_request|tokens_per_j|load_level|energy_problem|throttle)"
)


def old_warehouse(path):
    """A warehouse as the code before v18 left it: schema v17 and the views of its day (v_run_base
    without the workload column; the match-ups under their names of then, `pair` and `decision_pair`)."""
    wh = create_at_version(path, 17)
    old_views = (
        wschema.views_sql()
        .replace(
            "    r.workload,  -- what the profile asks (fingerprint.workload_digest): in the series\n", ""
        )
        .replace(  # v_comparisons before the estimator, failure and exclusion columns
            ",\n       c.primary_metric, c.estimator, c.withheld, c.fails_more, c.failed_runs_a, c.runs_a,\n"
            "       c.failed_runs_b, c.runs_b, c.failure_p, c.excluded_a, c.excluded_b, c.exclusion_p\n",
            "\n",
        )
    )
    # views over tables of later versions (v20's quality_answers) did not exist then
    old_views = old_views.split("\n-- Each run's score on the evaluation set")[0]
    # nor v21's power and energy columns, nor v24's baseline_source
    old_views = "\n".join(
        line
        for line in old_views.splitlines()
        if not V21_COLUMN.search(line) and "r.baseline_source" not in line
    )
    for new, old in (
        ("v_decision_matchups", "v_decision_pairs"),
        ("c.matchup", "c.decision_pair"),
        ("other_matchup", "other_pair"),
        ("matchup", "pair"),
    ):
        old_views = old_views.replace(new, old)
    assert old_views != wschema.views_sql()
    wh.con.execute(old_views).fetchall()
    wh.close()


def test_a_reader_refuses_the_old_views_and_strix_migrate_brings_them_up(tmp_path, capsys):
    path = tmp_path / "w.duckdb"
    old_warehouse(path)
    query = ["query", "--warehouse", str(path), "--format", "csv", "SELECT count(*) AS n FROM v_run_base"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the read-only open's "schema is v17" warning
        assert main(query) != 0
    refused = capsys.readouterr().err
    # the first of the changed views it meets (v_comparisons, v_decision_pairs, v_run_base)
    assert "v_comparisons is not the project's definition" in refused and "strix migrate" in refused

    assert main(["migrate", "--warehouse", str(path)]) == 0
    said = capsys.readouterr().err
    now = wschema.current_schema_version()
    # every migration from v18 on, by name (v18 workload, v19 matchup_columns, and any newer)
    applied = ", ".join(f"v{m.version} {m.name}" for m in wschema.migrations()[17:])
    assert applied.startswith("v18 workload, v19 matchup_columns")
    assert f"migrated to schema v{now} ({applied})" in said, said

    assert main(query) == 0
    assert capsys.readouterr().out.split() == ["n", "0"]
    # again: nothing left to do, and it says so
    assert main(["migrate", "--warehouse", str(path)]) == 0
    assert f"already at schema v{now}" in capsys.readouterr().err
