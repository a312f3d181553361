"""The host's share of a pass's noise: /proc/stat steal and the CPU used outside
the engine and the client, the CPU frequency, a Box's GPU clocks, temperature, power and profile from
the fixture sysfs tree, a fixed job's slowdown (hosts/probes/cpu.py), and a busy pass named by what
made it busy."""

from __future__ import annotations

import os

import pytest
from support.paths import FIXTURES

from strix_pipeline.hosts.probes import cpu as cpu_probe
from strix_pipeline.hosts.probes import host_noise
from strix_pipeline.hosts.probes.host_noise import CpuTimes, Snapshot, noise_between

ROOT = FIXTURES / "sysroot"


def test_the_fixture_tree_reads_a_boxs_gpu_cpu_and_engine() -> None:
    cpu = host_noise.read_cpu_times(ROOT)
    assert cpu == CpuTimes(
        total=10132153 + 290696 + 3084719 + 46828483 + 16683 + 0 + 25195 + 512,
        idle=46828483 + 16683,
        steal=512,
    )
    # the command name holds a space and a parenthesis: utime 7300 + stime 1200 all the same
    assert host_noise.read_process_ticks(4242, ROOT) == 8500
    assert host_noise.read_process_ticks(99999, ROOT) is None  # gone
    assert host_noise.read_cpu_khz(ROOT) == (2994000, 3006000)
    (gpu,) = host_noise.read_gpus(ROOT)  # card0 (framebuffer) and card2 (no hwmon) are left out
    assert gpu.card == "card1"
    assert (gpu.sclk_mhz, gpu.mclk_mhz, gpu.temp_c, gpu.power_w) == pytest.approx((2900, 1000, 61, 118))
    assert gpu.performance_level == "high"


def snap(total: int, idle: int, steal: int, engine: int | None, client: int | None) -> Snapshot:
    return Snapshot(CpuTimes(total, idle, steal), engine, client, cpu_khz=(3000000,))


def test_steal_and_outside_are_shares_of_all_cpu_time_in_the_pass() -> None:
    # 1000 ticks in the pass: 300 idle, 50 stolen, the engine 500, the client 100 -> 50 elsewhere
    n = noise_between(
        snap(0, 0, 0, None, 10), snap(1000, 300, 50, 500, 110), busy_steal_pct=5, busy_outside_pct=15
    )
    assert n.steal_pct == pytest.approx(5.0)
    assert n.outside_pct == pytest.approx(5.0)
    assert n.engine_pct == pytest.approx(50.0)
    assert n.cpu_mhz == pytest.approx(3000)
    assert n.busy is None  # at the thresholds, not beyond them


def test_a_busy_host_is_named_by_what_made_it_busy() -> None:
    # a neighbour took 300 of 1000 ticks beside an engine of 400 and a client of 50
    n = noise_between(
        snap(0, 0, 0, 0, 0), snap(1000, 180, 70, 400, 50), busy_steal_pct=5, busy_outside_pct=15
    )
    assert n.outside_pct == pytest.approx(30.0)
    assert n.busy is not None
    assert "7.0 % CPU stolen (threshold 5 %)" in n.busy
    assert "30.0 % CPU used outside the engine and client (threshold 15 %)" in n.busy
    assert "BUSY" in n.describe()


def test_an_engines_ticks_are_its_whole_sessions(tmp_path) -> None:
    # vLLM: the API server leads the session, the engine core and the worker do the work; a process
    # of another session (the load generator, a neighbour) is not the engine's
    def stat(pid: int, comm: str, session: int, utime: int, stime: int) -> None:
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "stat").write_text(
            f"{pid} ({comm}) S 1 {session} {session} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 1 1 1 0\n"
        )

    stat(100, "vllm serve", 100, 300, 100)
    stat(101, "VLLM::EngineCore", 100, 2000, 50)
    stat(102, "VLLM::Worker", 100, 9000, 400)
    stat(200, "python (loadgen)", 200, 700, 70)
    assert host_noise.read_engine_ticks(100, tmp_path) == 400 + 2050 + 9400
    assert host_noise.read_engine_ticks(200, tmp_path) == 770
    assert host_noise.read_engine_ticks(999, tmp_path) is None


def test_a_slow_probe_makes_a_pass_busy_that_no_counter_shows() -> None:
    quiet = snap(0, 0, 0, 0, 0), snap(1000, 400, 0, 500, 100)  # nothing stolen, nothing else ran
    # the slower of the pass's probes (46 ms) against the session's fastest (40 ms): 15 % slower
    slow = cpu_probe.slowdown_pct((41.0, 46.0), 40.0)
    assert slow == pytest.approx(15.0)
    n = noise_between(
        *quiet, busy_steal_pct=5, busy_outside_pct=15, probe_slowdown_pct=slow, busy_probe_pct=10
    )
    assert n.busy == "the CPU probe ran 15.0 % slower than the session's fastest (threshold 10 %)"
    assert n.as_dict()["probe_slowdown_pct"] == pytest.approx(15.0)
    ok = noise_between(
        *quiet,
        busy_steal_pct=5,
        busy_outside_pct=15,
        probe_slowdown_pct=cpu_probe.slowdown_pct((40.0, 43.0), 40.0),
        busy_probe_pct=10,
    )
    assert ok.busy is None and "probe +7.5 %" in ok.describe()
    assert noise_between(*quiet, busy_steal_pct=5, busy_outside_pct=15).probe_slowdown_pct is None


def test_the_live_host_gives_a_snapshot_of_this_process() -> None:
    s = host_noise.snapshot(os.getpid())
    assert s.cpu is not None and s.cpu.total > 0
    assert s.client_ticks is not None and s.engine_ticks is not None


def test_a_malformed_proc_stat_is_named() -> None:
    with pytest.raises(ValueError, match="/proc/stat: no aggregate 'cpu' line"):
        host_noise.parse_proc_stat("intr 1\n")
    with pytest.raises(ValueError, match="/proc/stat: the cpu line is not numbers"):
        host_noise.parse_proc_stat("cpu a b c\n")
