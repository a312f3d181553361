"""The weekly warehouse backup: `strix backup` as a Dagster job and schedule (STOPPED until turned on
in the UI, so an instance never starts copying a warehouse its owner has not chosen a place for)."""

import dagster as dg

from assets.resources import StrixConfigResource
from strix_pipeline.warehouse.backup import KEEP, backup, default_directory

BACKUP_CRON = "0 12 * * 0"  # Sunday noon: away from the Box's night window and its runs' writes


@dg.op(description=f"A consistent copy of the warehouse beside it (backups/), the newest {KEEP} kept.")
def warehouse_backup_op(context: dg.OpExecutionContext, strix: StrixConfigResource) -> str:
    config = strix.get()
    target = config.warehouse_target()
    made = backup(target, default_directory(target, config.artifacts_dir()), KEEP)
    context.log.info(made.describe())
    return str(made.path)


@dg.job(description="Back the warehouse up (strix backup): a DuckDB file or a DuckLake catalog.")
def warehouse_backup_job() -> None:
    warehouse_backup_op()


warehouse_backup_schedule = dg.ScheduleDefinition(
    name="warehouse_backup",
    job=warehouse_backup_job,
    cron_schedule=BACKUP_CRON,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description=f"Weekly: a consistent copy of the warehouse, the newest {KEEP} kept (strix backup).",
)
