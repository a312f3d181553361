"""The project installs as a package: the wheel `pip install .` builds holds every module, and a fresh
virtualenv with only that wheel runs `strix` and loads the Dagster definitions.

The editable install of `make` maps the source tree, so a package the wheel leaves out still imports
there; only an install from the wheel, away from the checkout, shows it. The fresh virtualenv borrows
the lock's dependencies from the test's own environment through a path file instead of downloading
them again: what is under test is the project's own packaging, not pip's resolver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from support.package_index import real_index_env
from support.paths import REPO

PROJECT_ROOTS = ("strix_pipeline", "strix_dagster", "assets", "schedules")
DATA_FILES = ("strix_pipeline/default.toml", "strix_pipeline/warehouse/sql/views.sql")


def _modules() -> list[str]:
    out = []
    for root in PROJECT_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append(".".join(parts))
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the project's wheel and nothing of the checkout."""
    mp = pytest.MonkeyPatch()
    real_index_env(mp)  # the build backend comes from the index pip really installs from
    try:
        dist = tmp_path_factory.mktemp("dist")
        # from a copy: setuptools builds in the source tree and would leave build/ in the checkout
        source = tmp_path_factory.mktemp("source")
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, source / name)
        for root in PROJECT_ROOTS:
            shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__"))
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        mp.undo()
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("strix_pipeline-*.whl")
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    # the dependencies only: this environment's site-packages holds the editable finder of the
    # checkout too, but a path file adds a folder without running the .pth files inside it
    (site / "lock-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # --force-reinstall: the borrowed folder holds this project's editable install, which pip would
    # otherwise take for the wheel's own version already installed
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
        + ["--force-reinstall", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
        cwd=env_dir,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return env_dir


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def test_every_module_imports_from_the_wheel_away_from_the_checkout(installed: Path, tmp_path: Path) -> None:
    modules = _modules()
    assert "strix_pipeline.planning.week" in modules and "strix_pipeline.analysis.bisect.search" in modules
    script = (
        "import importlib, pathlib, sys\n"
        f"modules = {modules!r}\n"
        "bad = []\n"
        "for m in modules:\n"
        "    try:\n"
        "        mod = importlib.import_module(m)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
        "        continue\n"
        f"    if not pathlib.Path(mod.__file__).resolve().is_relative_to({str(installed.resolve())!r}):\n"
        "        bad.append(f'{m}: imported from {mod.__file__}')\n"
        "import strix_pipeline\n"
        "root = pathlib.Path(strix_pipeline.__file__).parent.parent\n"
        f"for f in {list(DATA_FILES)!r}:\n"
        "    if not (root / f).is_file():\n"
        "        bad.append(f'{f}: not in the wheel')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    run = subprocess.run(
        [installed / "bin" / "python", "-c", script],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


def test_the_installed_strix_runs_and_the_definitions_load(installed: Path, tmp_path: Path) -> None:
    env = _clean_env()
    strix = subprocess.run(
        [installed / "bin" / "strix", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert strix.returncode == 0, strix.stderr[-3000:]
    assert "doctor" in strix.stdout
    defs = subprocess.run(
        [
            installed / "bin" / "python",
            "-c",
            "import dagster as dg, strix_dagster.definitions as d\n"
            "defs = d.load_definitions()\n"
            "dg.Definitions.validate_loadable(defs)\n"
            "print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert defs.returncode == 0, defs.stderr[-4000:]
    assert "switch_decision" in defs.stdout and "benchmark_run" in defs.stdout
