"""The series fingerprint: one function, the inputs docs/warehouse.md lists, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest
from support.warehouse import make_run

from strix_pipeline.config import ScenarioProfile
from strix_pipeline.fingerprint import differences, run_fingerprint, series_fingerprint, workload_digest
from strix_pipeline.loadgen.profiles import default_profile

BASE = dict(
    scenario="concurrency_sweep",
    engine_kind="vllm",
    engine_flags='["--max-num-seqs", "8"]',
    engine_env='{"ROCBLAS_USE_HIPBLASLT": "1", "VLLM_USE_TRITON_AWQ": "1"}',
    model="Qwen3-30B-A3B",
    quantization="BF16",
    host="strix-halo",
    rocm_version="7.0.2",
    kernel="6.17.0",
    kernel_cmdline="amd_iommu=off ttm.pages_limit=27648000",
    ttm_pages_limit=27648000,
    firmware="fw-1",
    harness_version="0.1.0",
    workload="wl-0123456789ab",
)


def test_same_inputs_same_fingerprint_and_series_format() -> None:
    a = series_fingerprint(**BASE)
    assert a == series_fingerprint(**BASE)
    run_part, scenario = a.split("/")
    assert scenario == "concurrency_sweep" and len(run_part) == 16
    assert series_fingerprint(**{**BASE, "scenario": None}) == run_part


@pytest.mark.parametrize(
    "key,value",
    [
        ("scenario", "prefill_ladder"),
        ("engine_kind", "sglang"),
        ("engine_flags", '["--max-num-seqs", "16"]'),
        ("engine_env", '{"ROCBLAS_USE_HIPBLASLT": "0", "VLLM_USE_TRITON_AWQ": "1"}'),
        ("engine_env", None),
        ("model", "Qwen3-32B"),
        ("quantization", "FP8"),
        ("host", "other-box"),
        ("rocm_version", "7.1.0"),
        ("kernel", "6.18.0"),
        ("kernel_cmdline", "amd_iommu=off ttm.pages_limit=9437184"),
        ("ttm_pages_limit", 9437184),
        ("firmware", "fw-2"),
        ("harness_version", "0.2.0"),
        ("workload", "wl-ba9876543210"),
    ],
)
def test_each_input_changes_the_fingerprint(key: str, value: str) -> None:
    assert series_fingerprint(**{**BASE, key: value}) != series_fingerprint(**BASE)


def test_equivalent_spellings_do_not_split_a_series() -> None:
    assert series_fingerprint(**{**BASE, "quantization": "bf16"}) == series_fingerprint(**BASE)
    # an environment has no order; none given and an empty one are one
    env = {"VLLM_USE_TRITON_AWQ": "1", "ROCBLAS_USE_HIPBLASLT": "1"}
    assert series_fingerprint(**{**BASE, "engine_env": env}) == series_fingerprint(**BASE)
    assert series_fingerprint(**{**BASE, "engine_env": "{}"}) == series_fingerprint(
        **{**BASE, "engine_env": None}
    )
    assert series_fingerprint(**{**BASE, "engine_flags": ["--max-num-seqs", "8"]}) == series_fingerprint(
        **BASE
    )
    assert series_fingerprint(**{**BASE, "engine_flags": "[]"}) == series_fingerprint(
        **{**BASE, "engine_flags": None}
    )
    # flag order carries values, so it matters
    swapped = series_fingerprint(**{**BASE, "engine_flags": '["8", "--max-num-seqs"]'})
    assert swapped != series_fingerprint(**BASE)


def test_image_version_and_time_are_not_part_of_it() -> None:
    r = make_run("a", version="v1", sort_key="1").run
    s = dataclasses.replace(
        r, run_id="b", image_version="v2", image_tag="v2", image_digest="sha256:x", image_sort_key="2"
    )
    assert run_fingerprint(r) == run_fingerprint(s)
    assert differences(r, s) == {}
    t = dataclasses.replace(r, quantization="Q8_0", kernel="6.18")
    assert set(differences(r, t)) == {"quantization", "kernel"}
    assert run_fingerprint(r, "smoke") == run_fingerprint(r) + "/smoke"


def test_the_one_list_is_what_the_fingerprint_hashes_and_the_warehouse_stores(wh) -> None:
    from strix_pipeline.fingerprint import COMPARABILITY_FIELDS

    columns = set(wh.query_df("SELECT * FROM runs LIMIT 0").columns)
    assert set(COMPARABILITY_FIELDS) <= columns  # every field is recorded per run
    r = make_run("a").run
    for name in COMPARABILITY_FIELDS:  # and every field on the list moves the fingerprint
        other = {"engine_flags": "--x", "ttm_pages_limit": 12345, "engine_env": {"A": "1"}}.get(
            name, "something-else"
        )
        changed = dataclasses.replace(r, **{name: other})
        assert run_fingerprint(changed) != run_fingerprint(r), name
        assert set(differences(r, changed)) == {name}


def test_the_workload_is_what_the_profile_asks_not_its_name_or_timeout() -> None:
    quick = default_profile("quick")
    assert workload_digest(quick) != workload_digest(ScenarioProfile())  # quick and standard never mix
    assert workload_digest(quick) != workload_digest(default_profile("decision"))
    sweep = quick.concurrency_sweep.model_copy(
        update={"input_tokens": quick.concurrency_sweep.input_tokens + 32}
    )
    assert workload_digest(quick.model_copy(update={"concurrency_sweep": sweep})) != workload_digest(quick)
    # when a request is given up is no part of what is asked
    assert workload_digest(quick.model_copy(update={"request_timeout_s": 5})) == workload_digest(quick)
    # a run of a changed profile is not comparable with the old one, and says why
    a, b = make_run("a").run, make_run("b").run
    a.workload, b.workload = workload_digest(quick), workload_digest(quick.model_copy(update={"seed": 7}))
    assert run_fingerprint(a) != run_fingerprint(b)
    assert set(differences(a, b)) == {"workload"}
