"""The one partitioning of the benchmark: image versions, keyed ``<engine>:<version>@<digest12>``."""

from dagster import DynamicPartitionsDefinition

image_versions = DynamicPartitionsDefinition(name="image_versions")

# the tags a benchmark run carries: its host (the UI's Runs page filters by it) and, when the weekly
# schedule launched it, its night (the tick's date): the runs of one night share production's outage
HOST_TAG = "strix/host"
NIGHT_TAG = "strix/night"
