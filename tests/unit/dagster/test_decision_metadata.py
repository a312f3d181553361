"""The switch decision in the Dagster UI: the criteria as a table (rounded figures with units, no
machine path), and what `make ui` says the automations would run once turned on."""

from __future__ import annotations

import re

import dagster as dg
from support.decision_seed import SEPT

from assets.decision_metadata import answer_metadata, criteria_table, without_paths
from strix_dagster.automations import automations_text
from strix_dagster.definitions import load_definitions
from strix_pipeline.analysis.decision import CRITERIA, Decision, Wording
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import GIB

W = Wording("vLLM", "llama-server", "0.32.0", 5)


def _crit(cid: str, status: str, value, threshold, unit, reason: str, low=None, high=None) -> CriterionResult:
    return CriterionResult(
        "e1", SEPT, "local", "", cid, CRITERIA[cid], True, status, value, threshold, low, high, unit,
        ["r1", "r2"], [], False, reason, None,
    )  # fmt: skip


def test_the_criteria_are_a_table_with_rounded_figures_and_no_machine_path() -> None:
    d = Decision(
        "evaluate",
        "e1",
        SEPT,
        "local",
        [
            _crit("C3", "pass", 0.49871234, 1.0, "ratio", "ttft", 0.4712, 0.5333),
            _crit(
                "C5",
                "fail",
                6.412345678 * GIB,
                0.4812345 * GIB,
                "bytes",
                "held after load (model /root/.cache/strix-pipeline/models/gemma3-270m-q4_k_m.gguf)",
            ),
            _crit("C1", "pass", 3879.695464149999, None, "ms", "ready in /home/u/.cache/x/y/ log"),
        ],
    )
    table = criteria_table(d, W)
    assert isinstance(table, dg.TableMetadataValue)
    rows = {r.data["criterion"].split()[0]: r.data for r in table.records}
    assert rows["C5"]["figure"] == "6.4 GiB" and rows["C5"]["threshold"] == "0.48 GiB"
    assert rows["C3"]["figure"] == "0.50x" and rows["C3"]["interval"] == "0.47x – 0.53x"
    assert rows["C1"]["figure"] == "3880 ms"
    text = repr([r.data for r in table.records])
    assert not re.search(r"\d\.\d{4,}", text), text  # no raw float
    assert "/root/" not in text and "/home/" not in text
    assert "…/gemma3-270m-q4_k_m.gguf" in rows["C5"]["reason"]
    assert rows["C5"]["criterion"] == "C5 memory held not above llama-server's"
    assert without_paths("see https://example.org/a/b") == "see https://example.org/a/b"


def test_the_asset_opens_with_the_answer_the_deciding_figure_and_the_forest_plot(tmp_path) -> None:
    c3 = _crit("C3", "pass", 0.5, 1.0, "ratio", "ttft", 0.47, 0.53)
    c5 = _crit("C5", "fail", 6.41 * GIB, 0.48 * GIB, "bytes", "held; at the same context")
    d = Decision("evaluate", "e1", SEPT, "local", [_crit("C1", "pass", None, None, None, "ok"), c3, c5])
    meta = answer_metadata(d, W, {"r1": 6.41 * GIB, "r2": 0.48 * GIB}, tmp_path)
    assert list(meta) == ["sentence", "deciding_figure", "what_would_change", "forest"]
    assert meta["sentence"].startswith("Not yet: stay on llama-server for now.")
    assert "13.4× llama-server's memory at the same context" in meta["deciding_figure"]
    assert "C5 allows no more than llama-server's own 0.48 GiB" in meta["deciding_figure"]
    assert meta["what_would_change"] == "Switching needs C5 to pass."
    assert meta["forest"].value.startswith("![forest](data:image/png;base64,")


def test_make_ui_says_every_automation_is_off_and_what_it_would_run() -> None:
    text = automations_text(load_definitions())
    names = ("weekly_benchmark", "new_image_sensor", "bisect_sensor", "analysis_automation")
    for name in names:
        line = next(x for x in text.splitlines() if f"- {name} " in x)
        assert "[off]" in line, line
    assert "cron '0 3 * * 1'" in text
