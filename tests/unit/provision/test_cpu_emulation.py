"""``STRIX_EMULATE_CPU=avx2``: one switch, and every reader of the CPU flags sees an AVX2-only CPU under it
-- the llama-server build, vLLM's dtype and its table, the local vLLM's environment, the image the Docker
tests run, the run's host fields, ``strix doctor`` and CI's "cpu flags" line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.doctor_checks import by_name, doctor_config
from support.paths import REPO
from support.vllm_image import EMULATION_DIR, emulation_files, image_env

from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import run_checks
from strix_pipeline.engines import vllm_dtype
from strix_pipeline.engines.base import flag_value
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer
from strix_pipeline.provision import cpu_emulation, llamacpp_build
from strix_pipeline.runner import BenchmarkTarget, local, run_benchmark

# a 2-core AMX Xeon (Sapphire Rapids) and a 2-core AVX2-only EPYC (Zen 3), as /proc/cpuinfo gives them
XEON = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n"
    "flags\t\t: fpu sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512bw avx512_vnni avx512_bf16 "
    "amx_tile amx_bf16 amx_int8\n"
)
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7R13 Processor\nflags\t\t: fpu sse4_2 avx avx2 fma f16c bmi2\n"
AVX512_AMX = {
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
}


@pytest.fixture
def emulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_emulation.ENV, "avx2")


@pytest.fixture(autouse=True)
def native(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts with the switch off (whatever the shell says) and a cache of its own."""
    monkeypatch.delenv(cpu_emulation.ENV, raising=False)
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path / "cache"))


# ---------------------------------------------------------------- the switch


@pytest.mark.parametrize(
    ("value", "kind"), [("", None), ("0", None), ("native", None), ("avx2", "avx2"), ("AVX2", "avx2")]
)
def test_the_switch_is_one_variable(value: str, kind: str | None) -> None:
    assert cpu_emulation.emulated({cpu_emulation.ENV: value}) == kind
    assert cpu_emulation.emulated({}) is None


def test_an_unknown_kind_is_refused_by_the_variables_name() -> None:
    with pytest.raises(ValueError, match=r"STRIX_EMULATE_CPU='avx1'.*avx2"):
        cpu_emulation.emulated({cpu_emulation.ENV: "avx1"})


# ---------------------------------------------------------------- the llama-server build


def test_the_llama_build_reads_an_avx2_cpu_under_the_switch(emulate: None) -> None:
    flags = llamacpp_build.cpu_flags(XEON)
    assert not flags & AVX512_AMX and {"avx2", "fma", "f16c"} <= flags
    # the same build, under the same key, as the AVX2-only EPYC's: its cache serves that machine too
    assert llamacpp_build.build_spec(flags, "x86_64") == llamacpp_build.build_spec(
        llamacpp_build.cpu_flags(EPYC), "x86_64"
    )


def test_without_the_switch_the_llama_build_reads_the_cpu_as_it_is() -> None:
    assert AVX512_AMX <= llamacpp_build.cpu_flags(XEON)


# ---------------------------------------------------------------- vLLM's dtype


def test_vllms_dtype_is_chosen_for_the_emulated_cpu(tmp_path: Path, emulate: None) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(XEON)
    cpu = vllm_dtype.this_cpu(info)
    assert cpu.emulated == "avx2" and not cpu.flags & AVX512_AMX
    assert cpu == vllm_dtype.parse_cpuinfo(XEON).as_avx2()  # its own table key: the emulated CPU's
    choice = vllm_dtype.choose_for(cpu, "0.32.0")
    assert choice.dtype == "float32" and "[avx2 emulation]" in choice.recorded


def test_without_the_switch_vllms_dtype_is_the_cpus_own(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(XEON)
    cpu = vllm_dtype.this_cpu(info)
    assert cpu.emulated is None and vllm_dtype.choose_for(cpu, "0.32.0").dtype == "bfloat16"


# ---------------------------------------------------------------- the local vLLM's environment

# the fake engine says what it was started with, then exits before it is ready
SAYS = (
    "import os; d = os.environ.get('PYTHONPATH', ''); "
    "s = open(d + '/sitecustomize.py').read() if os.path.exists(d + '/sitecustomize.py') else ''; "
    "print('ISA', os.environ.get('ONEDNN_MAX_CPU_ISA'), os.environ.get('ATEN_CPU_CAPABILITY'), "
    "'_is_avx512_supported' in s, flush=True); raise SystemExit(3)"
)


def _start_fake_vllm(tmp_path: Path) -> tuple[LocalVllmServer, str]:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    srv = LocalVllmServer(
        checkpoint=ckpt,
        executable=[sys.executable, "-S", "-c", SAYS],  # -S: the sitecustomize is read, not run here
        log_dir=tmp_path,
        ready_timeout_s=60,
        same_context=False,
    )
    with pytest.raises(EngineStartError) as info:
        srv.start()
    return srv, info.value.log_tail or ""


def test_the_local_vllm_starts_under_the_emulation(tmp_path: Path, emulate: None) -> None:
    srv, said = _start_fake_vllm(tmp_path)
    assert "ISA AVX2 avx2 True" in said
    assert flag_value(srv.command, "--dtype") == "float32"
    assert srv.dtype_choice is not None and "avx2 emulation" in srv.dtype_choice.recorded


def test_without_the_switch_the_local_vllm_gets_no_emulation(tmp_path: Path) -> None:
    _srv, said = _start_fake_vllm(tmp_path)
    assert "ISA None None False" in said


# ---------------------------------------------------------------- the Docker tests' vLLM image


def test_the_vllm_test_image_carries_the_emulation(emulate: None) -> None:
    files = emulation_files()
    assert files == {f"{EMULATION_DIR}/sitecustomize.py": vllm_dtype.SITECUSTOMIZE.encode()}
    env = image_env()
    assert env["PYTHONPATH"] == EMULATION_DIR and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["PATH"]


def test_without_the_switch_the_vllm_test_image_is_plain() -> None:
    assert emulation_files() == {} and set(image_env()) == {"PATH"}


# ---------------------------------------------------------------- the run's host fields


class _RefusingServer:
    """A local engine that will not start: the run's facts up to the start are what is read."""

    threads = 1
    log_path = None
    pid = None

    def provision(self) -> None:
        pass

    def __enter__(self) -> None:
        raise EngineStartError("failed_start", "the stand-in does not start")

    def __exit__(self, *exc: object) -> None:
        pass

    def stop(self) -> None:
        pass


def _local_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(local, "local_server", lambda *a, **k: _RefusingServer())
    monkeypatch.setattr(local, "probe_bandwidth", lambda *a, **k: None)
    config = load_config(doctor_config(tmp_path))
    target = BenchmarkTarget(host="local", engine="llamacpp", model="gemma3-270m", profile="tiny", image=None)
    return run_benchmark(config, target, log=lambda _line: None).run


def test_the_runs_host_fields_say_avx2_emulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _local_run(tmp_path / "a", monkeypatch)
    monkeypatch.setenv(cpu_emulation.ENV, "avx2")
    emulated = _local_run(tmp_path / "b", monkeypatch)
    assert plain.status == emulated.status == "failed_start"
    assert "emulation" not in (plain.kernel or "")
    assert emulated.kernel == f"{plain.kernel} (avx2 emulation)"
    # another series: an emulated run is never compared with the CPU's own
    assert run_fingerprint(emulated) != run_fingerprint(plain)


# ---------------------------------------------------------------- what doctor and CI say


def test_doctor_says_the_emulation_is_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(doctor_config(tmp_path))
    cpu = by_name(run_checks(config, start_engines=False), "local", "CPU kind")
    assert cpu.ok and "native" in cpu.detail and "emulation" not in cpu.detail
    monkeypatch.setenv(cpu_emulation.ENV, "avx2")
    cpu = by_name(run_checks(config, start_engines=False), "local", "CPU kind")
    assert cpu.ok and "avx2 emulation ON (STRIX_EMULATE_CPU=avx2)" in cpu.detail
    assert "avx512" not in cpu.detail.split("the engines see", 1)[1]
    monkeypatch.setenv(cpu_emulation.ENV, "sse")
    cpu = by_name(run_checks(config, start_engines=False), "local", "CPU kind")
    assert not cpu.ok and cpu.required and "STRIX_EMULATE_CPU" in (cpu.fix or "")


def test_cis_cpu_flags_line_says_the_emulation_is_on() -> None:
    on = cpu_emulation.flags_line(XEON, {cpu_emulation.ENV: "avx2"})
    assert on.startswith("cpu flags: avx2=yes avx512f=no avx512_bf16=no amx_tile=no amx_bf16=no")
    assert "avx2 emulation ON" in on and "avx512f avx512_bf16 amx_tile amx_bf16" in on
    assert cpu_emulation.flags_line(XEON, {}) == (
        "cpu flags: avx2=yes avx512f=yes avx512_bf16=yes amx_tile=yes amx_bf16=yes"
    )


def test_ci_prints_the_line_with_the_systems_python_before_any_venv() -> None:
    """.ci/run runs the module as a file, with no project package importable."""
    assert "python3 strix_pipeline/provision/cpu_emulation.py" in (REPO / ".ci" / "run").read_text()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {cpu_emulation.ENV: "avx2"}
    out = subprocess.run(
        [sys.executable, "-I", "strix_pipeline/provision/cpu_emulation.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.startswith("cpu flags: avx2=") and "avx512f=no" in out and "avx2 emulation ON" in out
