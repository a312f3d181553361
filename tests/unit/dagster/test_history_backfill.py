"""A history's runs are one backfill in the instance: the UI's Backfills page lists it, complete, with
its partitions and its runs (tagged with its id)."""

from __future__ import annotations

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.storage.tags import BACKFILL_ID_TAG

from assets.partitions import image_versions
from strix_dagster.definitions import build_definitions
from strix_dagster.history_backfill import HISTORY_TAG, HistoryBackfill
from strix_pipeline.config import config_path
from strix_pipeline.config_load import load_config

KEYS = ["llamacpp:b11401@aaaaaaaaaaaa", "llamacpp:b11434@bbbbbbbbbbbb"]


def test_the_backfill_is_recorded_complete_with_its_partitions() -> None:
    config = load_config(config_path())
    defs = build_definitions(config, str(config_path()))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(image_versions.name, KEYS)
        backfill = HistoryBackfill.start(instance, "history llamacpp: 2 releases", KEYS)
        assert backfill.tags == {
            BACKFILL_ID_TAG: backfill.backfill_id,
            HISTORY_TAG: "history llamacpp: 2 releases",
        }
        # nothing is written before the runs end: a REQUESTED backfill would be launched again by a daemon
        assert instance.get_backfills() == []
        backfill.finish(instance, defs, success=False)
        (stored,) = instance.get_backfills()
        assert stored.backfill_id == backfill.backfill_id and stored.title == "history llamacpp: 2 releases"
        assert stored.status == BulkActionStatus.COMPLETED_FAILED and stored.backfill_end_timestamp
        targeted = stored.asset_backfill_data.target_subset
        assert {
            pk
            for key in targeted.asset_keys
            for pk in targeted.get_partitions_subset(key).get_partition_keys()
        } == set(KEYS)
