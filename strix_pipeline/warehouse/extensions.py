"""The DuckDB extensions a DuckLake warehouse loads (from their PyPI packages, never fetched), and what
the connections that load them share."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from strix_pipeline.warehouse.errors import WarehouseError

# The extensions DuckLake needs, each from its PyPI package (module name, extension name). They are
# built for one DuckDB release and installed under extensions/v<release>/ in the package: this
# project's machines cannot reach extensions.duckdb.org, so DuckDB must never try to (autoinstall and
# autoload off) and loads exactly these files.
DUCKLAKE_EXTENSIONS: tuple[tuple[str, str], ...] = (
    ("duckdb_extension_postgres_scanner", "postgres_scanner"),
    ("duckdb_extension_ducklake", "ducklake"),
)
LAKE = "strix_lake"  # the lakehouse's name inside the connection (USEd, so queries name tables bare)

# Created with the instance; for a sandbox the rest (no external access, lock) follows the ATTACH.
LAKE_CONFIG: dict[str, str | bool] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def extension_file(module: str, name: str) -> Path:
    """The packaged ``<name>.duckdb_extension`` built for the running DuckDB; a clear error if absent."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        pkg = module.replace("_", "-")
        raise WarehouseError(
            f"the DuckLake warehouse needs the {name} DuckDB extension: pip install "
            f"{pkg}=={duckdb.__version__}"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    f = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not f.is_file():
        built = sorted(p.name for p in root.glob("v*")) or ["none"]
        raise WarehouseError(
            f"{f}: the {name} extension installed is built for DuckDB {', '.join(built)}, not the running "
            f"{duckdb.__version__}; install the same version of both (see requirements.lock)"
        )
    return f


def sql_str(s: str | Path) -> str:
    """``s`` as a SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"
