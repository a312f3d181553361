"""Docker Hub's aliases and the memory units each known in one place.

Before: the runner pulled ``index.docker.io/...`` by its registry name while the decision's criteria
and the client took it for Docker Hub; ``memory.summarize`` judged "returned to baseline" within 1 GiB
by default where the config and the guards speak GB.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from strix_pipeline.memory import summarize
from strix_pipeline.records import MemorySample
from strix_pipeline.registry.names import DOCKER_HUB_NAMES, normalize_repository, pull_reference
from strix_pipeline.units import GB, GIB

PACKAGE = Path(__file__).resolve().parents[2] / "strix_pipeline"
REPO = "vllm/vllm-openai-rocm"
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("alias", DOCKER_HUB_NAMES)
def test_every_docker_hub_alias_names_the_same_repository_and_pull(alias: str) -> None:
    assert normalize_repository(f"{alias}/{REPO}") == REPO
    assert normalize_repository(f"{alias}/library/ubuntu") == normalize_repository("ubuntu") == "ubuntu"
    # what the runner gives docker pull: the daemon's default registry, whichever alias was configured
    assert pull_reference(alias, REPO, DIGEST) == f"{REPO}@{DIGEST}"


def test_other_registries_keep_their_name() -> None:
    assert normalize_repository("ghcr.io/ggml-org/llama.cpp") == "ghcr.io/ggml-org/llama.cpp"
    assert pull_reference("127.0.0.1:5000", "strix/x", DIGEST) == f"127.0.0.1:5000/strix/x@{DIGEST}"
    assert normalize_repository(None) == normalize_repository("") == ""


def _string_constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_docker_hub_aliases_are_spelled_only_in_registry_names() -> None:
    """A second list of aliases is how the runner came to forget ``index.docker.io``."""
    names = PACKAGE / "registry" / "names.py"
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {s!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != names
        for s in _string_constants(path)
        if any(alias in s for alias in ("index.docker.io", "registry-1.docker.io"))
        or s in ("docker.io", "docker.io/")
    ]
    assert offenders == []


def test_returned_to_baseline_is_judged_in_gb_by_default() -> None:
    # 1.05 GB above the baseline: within 1 GiB, not within the config's 1 GB
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    above = int(1.05 * GB)
    assert GB < above < GIB
    samples = [
        MemorySample("r", t0 + timedelta(seconds=i), phase, "sysfs:card1", "vram_used", v)
        for i, (phase, v) in enumerate(
            [("baseline", 4 * GB), ("idle", 9 * GB), ("after_stop", 4 * GB + above)]
        )
    ]
    assert summarize(samples).memory_returned is False
    assert summarize(samples, tolerance_bytes=int(1.1 * GB)).memory_returned is True
