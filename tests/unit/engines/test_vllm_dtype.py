"""The vLLM dtype per CPU (engines/vllm_dtype.py): flags -> dtype + reason, a measured table overriding."""

from __future__ import annotations

from pathlib import Path

import pytest

from strix_pipeline.engines import vllm_dtype as vd

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}
AMX = AVX2 | {"avx512f", "amx_tile", "amx_bf16"}


@pytest.mark.parametrize(
    ("flags", "dtype", "word"),
    [
        (AVX2, "float32", "no avx512_bf16"),
        (AVX512_BF16, "bfloat16", "avx512_bf16"),
        (AMX, "bfloat16", "amx_bf16"),
    ],
)
def test_flags_decide_without_a_table(flags: frozenset[str], dtype: str, word: str) -> None:
    choice = vd.choose_dtype(flags)
    assert choice.dtype == dtype and word in choice.reason
    assert choice.recorded.startswith(f"{dtype}: ")


def test_a_measured_table_overrides_the_flags() -> None:
    table = vd.MeasuredTable(
        "cpu",
        "0.32.0",
        "2026-12-04",
        (
            vd.DtypeMeasurement("bfloat16", 17600.0),
            vd.DtypeMeasurement("float16", 9000.0),
            vd.DtypeMeasurement("float32", 4100.0),
        ),
    )
    choice = vd.choose_dtype(AVX2, table)
    assert (
        choice.dtype == "float32"
        and "float32 4.10 s" in choice.reason
        and "bfloat16 17.60 s" in choice.reason
    )
    faster_bf16 = vd.MeasuredTable(
        "cpu", "0.32.0", "d", (vd.DtypeMeasurement("bfloat16", 900.0), vd.DtypeMeasurement("float32", 1500.0))
    )
    assert vd.choose_dtype(AVX2, faster_bf16).dtype == "bfloat16"
    unsupported = vd.MeasuredTable("cpu", "0.32.0", "d", (vd.DtypeMeasurement("int4", 1.0),))
    assert vd.choose_dtype(AVX2, unsupported).dtype == "float32"  # not a dtype vLLM's CPU takes: ignored


def test_the_table_is_cached_per_cpu_and_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path))
    cpu = vd.parse_cpuinfo("model name\t: AMD EPYC\nflags\t\t: " + " ".join(sorted(AVX512_BF16)) + "\n")
    table = vd.MeasuredTable(
        "AMD EPYC",
        "0.32.0",
        "d",
        (vd.DtypeMeasurement("float32", 100.0), vd.DtypeMeasurement("bfloat16", 200.0)),
    )
    vd.save_table(cpu, table)
    assert vd.load_table(cpu, "0.32.0") == table
    assert vd.choose_for(cpu, "0.32.0").dtype == "float32"
    assert vd.load_table(cpu, "0.31.0") is None  # another release: not measured
    avx2 = cpu.as_avx2()
    assert not any(f.startswith("avx512") for f in avx2.flags) and vd.load_table(avx2, "0.32.0") is None
    assert vd.choose_for(avx2, "0.32.0").dtype == "float32"


def test_a_configured_dtype_is_found_and_bad_cpuinfo_is_named() -> None:
    assert vd.configured(["--model", "m", "--dtype", "float16"]) == "float16"
    assert vd.configured(["--dtype=bfloat16"]) == "bfloat16" and vd.configured([]) is None
    with pytest.raises(ValueError, match="flags"):
        vd.parse_cpuinfo("model name : x\n")


def test_for_launch_adds_the_choice_unless_the_configuration_gives_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path))
    avx2 = vd.CpuId("AMD EPYC", AVX2)
    flags, choice = vd.for_launch(["--model", "m"], avx2, "0.32.0")
    assert flags == ["--dtype", "float32"] and choice.dtype == "float32" and "no avx512_bf16" in choice.reason
    flags, choice = vd.for_launch(["--model", "m"], vd.CpuId("Xeon", AMX), "0.32.0")
    assert flags == ["--dtype", "bfloat16"] and "amx_bf16" in choice.reason
    flags, choice = vd.for_launch(["--dtype", "float16"], avx2, "0.32.0")
    assert flags == [] and choice.dtype == "float16" and choice.reason.startswith("configured")
    # a table measured on this CPU for this release decides over the flags
    vd.save_table(
        avx2,
        vd.MeasuredTable(
            "AMD EPYC",
            "0.32.0",
            "d",
            (vd.DtypeMeasurement("bfloat16", 1.0), vd.DtypeMeasurement("float32", 2.0)),
        ),
    )
    flags, choice = vd.for_launch([], avx2, "0.32.0")
    assert flags == ["--dtype", "bfloat16"] and "fastest measured" in choice.reason
