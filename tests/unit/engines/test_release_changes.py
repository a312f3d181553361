"""Per-release command-line differences are declared once, in the engine's module, and applied by
version: an older release gets its own spelling, today's and unknown versions get today's flags."""

from __future__ import annotations

from strix_pipeline.engines import llamacpp, vllm
from strix_pipeline.engines.base import ReleaseChange, flags_for_release

TODAY = ["--model", "/m", "--kv-cache-memory-bytes", "1073741824", "--max-num-seqs", "8"]


def test_vllm_before_0_10_2_has_no_cpu_kv_flag() -> None:
    flags, notes = vllm.release_flags("0.10.1.1", TODAY)
    assert flags == ["--model", "/m", "--max-num-seqs", "8"]
    assert notes == [
        "before 0.10.2: no --kv-cache-memory-bytes: the KV cache is sized by VLLM_CPU_KVCACHE_SPACE on the "
        "CPU (set), by --gpu-memory-utilization on a GPU (kept)"
    ]
    # the env that sizes it instead is always there
    assert vllm.cpu_env(1)["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert vllm.release_flags("0.8.5.post2", [*TODAY[:2], "--kv-cache-memory-bytes=5"])[0] == [
        "--model",
        "/m",
    ]


def test_today_and_unknown_versions_take_todays_flags() -> None:
    for version in ("0.10.2", "0.32.0", None, "not-a-version"):
        assert vllm.release_flags(version, TODAY) == (TODAY, [])


def test_changes_apply_newest_first_each_to_the_spelling_after_it() -> None:
    changes = (
        ReleaseChange("2.0", "--b was --a", lambda f: ["--a" if x == "--b" else x for x in f]),
        ReleaseChange("3.0", "--c was --b", lambda f: ["--b" if x == "--c" else x for x in f]),
    )
    assert flags_for_release(changes, "1.5", ["--c"])[0] == ["--a"]
    assert flags_for_release(changes, "2.5", ["--c"])[0] == ["--b"]
    assert flags_for_release(changes, "3.0", ["--c"]) == (["--c"], [])


def test_llama_declares_its_changes_in_its_module() -> None:
    # none in the index's window: an old build gets the same flags
    assert llamacpp.RELEASE_CHANGES == ()
    assert flags_for_release(llamacpp.RELEASE_CHANGES, "9093.0.0", ["-c", "2048"]) == (["-c", "2048"], [])
