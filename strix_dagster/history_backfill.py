"""A history's runs as one Dagster backfill, so the UI's Backfills page shows it with its partitions.

`strix history` executes its partitions in-process (like `strix run`: no daemon needed), each run
tagged with the backfill's id. The backfill record is written when the last run has ended, already
complete: a record written before would be REQUESTED, and a running daemon (`make ui`) would launch
the same partitions a second time. While the history runs, its runs are found by the tag
``strix/history``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster._core.utils import make_new_backfill_id

HISTORY_TAG = "strix/history"


@dataclass(frozen=True)
class HistoryBackfill:
    backfill_id: str
    title: str
    keys: tuple[str, ...]
    started: float

    @classmethod
    def start(cls, instance: dg.DagsterInstance, title: str, keys: list[str]) -> HistoryBackfill:
        del instance  # the record is written by finish(); see the module docstring
        return cls(make_new_backfill_id(), title, tuple(keys), time.time())

    @property
    def tags(self) -> dict[str, str]:
        return {BACKFILL_ID_TAG: self.backfill_id, HISTORY_TAG: self.title}

    def finish(self, instance: dg.DagsterInstance, defs: dg.Definitions, success: bool) -> None:
        graph = defs.resolve_asset_graph()
        selection = [k for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None]
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id=self.backfill_id,
            asset_graph=graph,
            partition_names=list(self.keys),
            asset_selection=selection,
            backfill_timestamp=self.started,
            tags=self.tags,
            dynamic_partitions_store=instance,
            all_partitions=False,
            title=self.title,
            description=f"strix history: {len(self.keys)} release(s), run in-process by `strix history`",
            run_config=None,
        )
        status = BulkActionStatus.COMPLETED_SUCCESS if success else BulkActionStatus.COMPLETED_FAILED
        instance.add_backfill(backfill._replace(status=status, backfill_end_timestamp=time.time()))
