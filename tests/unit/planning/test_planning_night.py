"""The night's fit: production stopped once, the window checked before each run, deferral by name,
the decision's runs and the canary first, and no run starved beyond the stated weeks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from strix_pipeline.planning import night_fit as fit
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.planning.window import Window, check_fit

START = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
NIGHT = Window(START, START + timedelta(hours=6))
MIN45 = Estimate(45 * 60.0, "default")


def run(
    name: str, priority: int = 0, canary: bool = False, weeks: int = 0, est: Estimate = MIN45
) -> fit.PlannedRun:
    return fit.PlannedRun(name, "box", est, priority, canary, weeks)


def nights(n: int) -> list[Window]:
    return [Window(NIGHT.start + timedelta(days=i), NIGHT.end + timedelta(days=i)) for i in range(n)]


def test_seven_45_minute_runs_fit_a_6_hour_night_with_one_production_cycle_the_eighth_is_deferred():
    runs = [run(f"r{i}") for i in range(8)]
    n = fit.plan_night(runs, NIGHT, stop_s=60, restart_s=180)
    assert [s.run.name for s in n.slots] == [f"r{i}" for i in range(7)]
    assert [r.name for r in n.deferred] == ["r7"]
    # production stopped once, at the window's start; the runs follow one another; back before the end
    assert n.production_down == START
    assert n.slots[0].start == START + timedelta(seconds=60)
    assert all(a.end == b.start for a, b in zip(n.slots, n.slots[1:], strict=False))
    assert n.production_up == n.slots[-1].end + timedelta(seconds=180) <= NIGHT.end
    assert all(s.fit.fits for s in n.slots)


def test_what_does_not_fit_goes_to_the_next_night_by_name_and_a_shorter_run_still_fills_the_window():
    long = run("long", est=Estimate(5.5 * 3600, "median"))
    runs = [run(f"r{i}") for i in range(6)] + [long, run("short", est=Estimate(600, "median"))]
    week = fit.plan_week(runs, nights(3))
    first, second = week.nights[0], week.nights[1]
    assert "long" in [r.name for r in first.deferred]
    assert "short" in [s.run.name for s in first.slots]  # fits after the long one was deferred
    assert [s.run.name for s in second.slots] == ["long"]
    assert week.left == () and len(week.nights) == 2  # a third night is not needed: not planned


def test_nothing_fits_production_is_not_stopped():
    n = fit.plan_night([run("huge", est=Estimate(7 * 3600, "median"))], NIGHT)
    assert n.production_down is None and n.slots == () and [r.name for r in n.deferred] == ["huge"]


def test_the_decision_runs_and_the_canary_go_first_whatever_order_they_come_in():
    runs = [
        run("rest-a"),
        run("rest-b"),
        run("baseline", priority=1),
        run("canary", canary=True),
        run("c1", priority=2),
    ]
    n = fit.plan_night(runs, NIGHT)
    assert [s.run.name for s in n.slots][0] == "c1"
    assert {s.run.name for s in n.slots[1:3]} == {"canary", "baseline"}
    tight = fit.plan_night(runs, Window(START, START + timedelta(hours=2, minutes=30)))
    assert {s.run.name for s in tight.slots} == {"c1", "canary", "baseline"}
    assert [r.name for r in tight.deferred] == ["rest-a", "rest-b"]


def test_a_deferred_run_is_never_starved_beyond_the_stated_weeks():
    """Each week brings more first-tier runs than one night holds; the rest one waits and ages."""
    starve = 3
    waiting = [run("rest")]
    for week in range(starve + 1):
        fresh = [run(f"w{week}-p{i}", priority=1) for i in range(9)]
        plan = fit.plan_week(fresh + waiting, nights(1), starve_weeks=starve)
        placed = [s.run.name for s in plan.nights[0].slots]
        if week < starve:
            assert "rest" not in placed and "rest" in [r.name for r in plan.left]
        else:  # its Nth week: it goes first
            assert placed[0] == "rest"
        waiting = [r for r in fit.next_week(plan.left) if r.name == "rest"]
    assert waiting == []


def test_the_window_check_returns_a_value_and_never_raises():
    at = START + timedelta(hours=5, minutes=30)
    no = check_fit(40 * 60.0, "40 min", NIGHT, at)
    assert no.fits is False and no.left_s == 1800.0 and "deferred to the next window" in no.reason
    yes = check_fit(20 * 60.0, "20 min", NIGHT, at)
    assert yes.fits is True and yes.left_s == 1800.0


def test_the_pairs_get_a_slot_only_when_asked_for():
    assert fit.pair_slot("C3/C5", "box", 0, [MIN45]) is None
    slot = fit.pair_slot("C3/C5", "box", 4, [MIN45, Estimate(15 * 60.0, "median")])
    assert slot is not None and slot.estimate.seconds == 4 * 30 * 60.0 and slot.priority == 1
