"""The one partitioning of the benchmark: image versions, keyed ``<engine>:<version>@<digest12>``."""

from dagster import DynamicPartitionsDefinition

image_versions = DynamicPartitionsDefinition(name="image_versions")
