"""Jobs, the new-image sensor, the production watch and the weekly schedule (re-exports only).

Neither the sensor nor the schedule asks for the analysis: the analysis assets carry an automation
condition (``assets.analysis.EAGER``) that the ``analysis_automation`` sensor evaluates, so they
materialise once the benchmarks they read have landed -- never beside them.
"""

from schedules.backup import warehouse_backup_job, warehouse_backup_schedule
from schedules.bisect import build_bisect_sensor
from schedules.jobs import (
    ANALYSIS,
    ANALYSIS_KEYS,
    HOST_TAG,
    analysis_job,
    benchmark_job_for,
    bisect_job_for,
    host_job_for,
    host_job_name,
    main_job_for,
    refresh_job,
)
from schedules.production_watch import build_production_watch
from schedules.requests import run_requests
from schedules.sensors import build_sensor
from schedules.weekly import build_schedule

__all__ = [
    "ANALYSIS",
    "ANALYSIS_KEYS",
    "HOST_TAG",
    "analysis_job",
    "benchmark_job_for",
    "bisect_job_for",
    "build_bisect_sensor",
    "build_production_watch",
    "build_schedule",
    "build_sensor",
    "host_job_for",
    "host_job_name",
    "main_job_for",
    "refresh_job",
    "run_requests",
    "warehouse_backup_job",
    "warehouse_backup_schedule",
]
