"""Energy per request and tokens per joule from the GPU samples beside the memory ones: the trapezoid
over the client's own window with both edges interpolated, refused on a gap or an unbracketed window,
RAPL's counter where no card gives power, the idle power apart, and the throttling rule."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.warehouse import T0, make_run

from strix_pipeline.hosts.probes import energy
from strix_pipeline.records import MemorySample
from strix_pipeline.runner.record import record_energy

CARD = "gpu:card1:"


def sample(t: float, source: str, metric: str, value: float, phase: str = "bench") -> MemorySample:
    return MemorySample("r1", T0 + timedelta(seconds=t), phase, source, metric, int(value))


def power(times, watts, phase: str = "bench") -> list[MemorySample]:
    return [
        sample(t, CARD + "power1_average", "power_uw", w * 1e6, phase)
        for t, w in zip(times, watts, strict=True)
    ]


def at(t: float) -> float:
    return (T0 + timedelta(seconds=t)).timestamp()


def test_a_ramp_integrates_exactly_with_both_edges_interpolated() -> None:
    series = energy.power_series(power(range(11), [10.0 * t for t in range(11)]))
    assert series is not None and series.source == "card1:power1_average" and not series.cumulative
    got = energy.window_energy(series, at(2.5), at(7.5))
    # the integral of 10 t W from 2.5 s to 7.5 s: 5 (7.5^2 - 2.5^2) = 250 J, over 5 s: 50 W
    assert got.joules == pytest.approx(250.0)
    assert got.mean_w == pytest.approx(50.0)


def test_two_cards_add_up() -> None:
    both = power(range(5), [40.0] * 5) + [
        sample(t, "gpu:card2:power1_input", "power_uw", 10e6) for t in range(5)
    ]
    series = energy.power_series(both)
    assert series is not None and series.source == "card1:power1_average + card2:power1_input"
    assert energy.window_energy(series, at(0), at(4)).joules == pytest.approx(200.0)


def test_a_gap_or_a_window_the_samples_do_not_bracket_is_no_figure() -> None:
    series = energy.power_series(power([0, 1, 2, 6, 7, 8], [50.0] * 6))
    assert series is not None
    gap = energy.window_energy(series, at(1.5), at(7.5))
    assert gap.joules is None and "4.0 s gap" in (gap.problem or "")
    assert energy.window_energy(series, at(6.5), at(7.5)).joules == pytest.approx(50.0)  # no gap inside
    late = energy.window_energy(series, at(7), at(9))
    assert late.joules is None and "bracket" in (late.problem or "")


def test_rapl_energy_is_the_counters_increase() -> None:
    rapl = [sample(t, "rapl:intel-rapl:0", "energy_uj", 1e9 + 30e6 * t) for t in range(6)]
    series = energy.power_series(rapl)
    assert series is not None and series.cumulative and "RAPL" in series.source
    assert energy.window_energy(series, at(0.5), at(4.5)).joules == pytest.approx(120.0)
    wrapped = energy.power_series(rapl[:3] + [sample(3, "rapl:intel-rapl:0", "energy_uj", 5)])
    assert wrapped is not None and energy.window_energy(wrapped, at(0), at(3)).joules is None


def test_idle_power_is_the_median_before_the_engine_started() -> None:
    samples = power([0, 1, 2], [20.0, 22.0, 90.0], phase="baseline") + power([3, 4], [100.0, 100.0])
    assert energy.idle_power_w(samples, energy.power_series(samples)) == pytest.approx(22.0)
    assert energy.idle_power_w(power([3], [100.0]), energy.power_series(power([3], [100.0]))) is None


def gpu_row(
    t: float, sclk_mhz: float, busy: int, temp_c: float = 60, phase: str = "bench"
) -> list[MemorySample]:
    return [
        sample(t, CARD + "freq1_input", "sclk_hz", sclk_mhz * 1e6, phase),
        sample(t, CARD + "gpu_busy_percent", "busy_pct", busy, phase),
        sample(t, CARD + "temp1_input", "temp_mdegc", temp_c * 1000, phase),
        sample(t, CARD + "temp1_crit", "temp_crit_mdegc", 100_000, phase),
        sample(t, CARD + "pp_dpm_sclk", "sclk_max_hz", 2900e6, phase),
    ]


def test_a_clock_below_80_percent_of_its_top_in_over_a_quarter_of_busy_samples_is_throttled() -> None:
    steady = [s for t in range(8) for s in gpu_row(t, 2800, 99)]
    # low clocks while idle (the GPU resting) or loading are no throttle
    resting = [s for t in range(8, 20) for s in gpu_row(t, 600, 0)] + gpu_row(20, 600, 99, phase="loading")
    assert energy.throttle(steady + resting) == energy.Throttle(False, None)
    # 3 of 10 busy samples at 2000 MHz (< 2320 MHz): 30 % > 25 %
    slow = steady[:-10] + [s for t in range(6, 9) for s in gpu_row(t, 2000, 99)] + gpu_row(9, 2800, 99)
    mark = energy.throttle(slow)
    assert mark.throttled is True
    assert mark.reason == "card1 shader clock below 80% of 2900 MHz in 3 of 10 busy samples (> 25%)"
    # 2 of 10: within the rule
    two = steady[:-5] + gpu_row(7, 2000, 99) + gpu_row(8, 2000, 99) + gpu_row(9, 2800, 99)
    assert energy.throttle(two).throttled is False


def test_a_temperature_at_its_critical_is_throttled_and_no_counter_is_unknown() -> None:
    mark = energy.throttle([s for t in range(4) for s in gpu_row(t, 2800, 99, temp_c=100 if t == 2 else 70)])
    assert mark.throttled is True and mark.reason == "card1 at 100 °C, at or above its critical 100 °C"
    assert energy.throttle([]) == energy.Throttle(None, None)


def test_a_run_stores_energy_at_decode_and_at_the_decisions_load_with_idle_apart() -> None:
    result = make_run("r1")  # sweep levels 1 and 5: measured requests sent at 1, 2, 3 s, each 2 s long
    for a in result.aggregates:
        a.tpot_mean_ms = 20.0  # the sweep's first level is the single-client decode level
        a.output_tokens_total = 512
    result.memory = power([-2, -1], [30.0, 34.0], phase="baseline") + power(range(0, 7), [130.0] * 7)
    result.memory += [s for t in range(0, 7) for s in gpu_row(t, 2800, 99)]
    record_energy(result, 5)
    run = result.run
    assert run.power_source == "card1:power1_average"
    assert run.idle_power_w == pytest.approx(32.0)  # stored apart, never subtracted
    # the window: 1 s to 5 s at 130 W = 520 J for 2 measured ok requests and 512 tokens
    assert run.decode_power_w == pytest.approx(130.0)
    assert run.decode_j_per_request == pytest.approx(260.0)
    assert run.decode_tokens_per_j == pytest.approx(512 / 520)
    assert run.load_level == 5 and run.load_j_per_request == pytest.approx(260.0)
    assert run.load_tokens_per_j == pytest.approx(512 / 520)
    assert run.energy_problem is None
    assert run.throttled is False


def test_a_host_without_a_power_counter_says_so_and_stores_nothing() -> None:
    result = make_run("r1")
    result.memory = [sample(0, "sysfs:card1", "gtt_used", 1)]
    record_energy(result, 5)
    run = result.run
    assert run.energy_problem == energy.NO_POWER_COUNTER
    figures = (run.idle_power_w, run.decode_j_per_request, run.decode_tokens_per_j, run.load_tokens_per_j)
    assert figures == (None, None, None, None)
    assert run.throttled is None


def test_a_level_the_run_did_not_measure_is_named() -> None:
    result = make_run("r1")
    result.memory = power(range(0, 7), [100.0] * 7)
    record_energy(result, 8)  # no tpot: no decode level either
    assert result.run.energy_problem == "decode: level not measured; load: level not measured"
    assert result.run.load_level is None
