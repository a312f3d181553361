"""Guards before and after an engine start, with fakes for the Docker client and memory readings."""

from __future__ import annotations

import socket
import time

import pytest

from strix_pipeline.config import DockerHostConfig, EngineConfig, ModelProfile
from strix_pipeline.engines import build_spec
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.errors import EngineStartError

GB = 10**9


def host(**kw) -> DockerHostConfig:
    base = dict(kind="docker", docker_host="unix:///var/run/docker.sock", devices=[], baseline_wait_s=0.3)
    base.update(kw)
    return DockerHostConfig(**base)


def sglang_profile(**kw) -> ModelProfile:
    base = dict(model="qwen", family="qwen", quantization="BF16", path="qwen", memory_fraction=0.8)
    base.update(kw)
    return ModelProfile(**base)


def test_reservation_guard_refuses_over_budget_with_the_numbers():
    p = sglang_profile(extra_flags={"sglang": ["--hicache-size", "30"]}, reserve_gb=2)
    spec = build_spec(EngineConfig(kind="sglang"), p, "/models/qwen", budget_gb=100)
    with pytest.raises(EngineStartError) as e:
        guards.check_reservations(spec.reservations, 100, what="sglang qwen")
    err = e.value
    assert err.status == "failed_guard"
    msg = err.reason
    assert "112.0 GB" in msg  # 0.8 x 100 + 30 + 2
    assert "--mem-fraction-static 0.8 x budget 100 GB = 80.0 GB" in msg
    assert "--hicache-size 30 = 30.0 GB" in msg and "reserve_gb = 2.0 GB" in msg
    assert "memory_budget_gb 100 GB" in msg and "by 12.0 GB" in msg


def test_reservation_guard_lets_a_fitting_profile_through_and_no_budget_means_no_check():
    spec = build_spec(EngineConfig(kind="sglang"), sglang_profile(), "/m", budget_gb=100)
    guards.check_reservations(spec.reservations, 100)
    big = build_spec(EngineConfig(kind="vllm"), sglang_profile(reserve_gb=500), "/m")
    guards.check_reservations(big.reservations, None)


def test_preflight_refuses_before_touching_anything():
    h = host(memory_budget_gb=50)
    p = sglang_profile(memory_fraction=0.9, reserve_gb=10)
    spec = build_spec(EngineConfig(kind="vllm"), p, "/m", budget_gb=50)
    client = FakeClient([FakeContainer("a", "running")])
    with pytest.raises(EngineStartError, match="55.0 GB"):
        guards.preflight(h, spec, client=client)
    assert client.containers.items[0].removed is False  # refused first: leftovers untouched


class FakeContainer:
    def __init__(self, name, status, run_id="old-run"):
        self.id = f"{name}-0123456789abcdef"
        self.name = name
        self.status = status
        self.labels = {"strix.managed": "true", "strix.run_id": run_id}
        self.image = None
        self.stopped = False
        self.removed = False

    def stop(self, timeout=10):
        self.stopped = True
        self.status = "exited"

    def remove(self, force=False):
        self.removed = True


class FakeContainers:
    def __init__(self, items):
        self.items = items
        self.filters = None

    def list(self, all=False, filters=None):
        self.filters = filters
        return [c for c in self.items if not c.removed]


class FakeClient:
    def __init__(self, items):
        self.containers = FakeContainers(items)


def test_leftovers_are_stopped_removed_and_returned():
    running, exited = (
        FakeContainer("strix-vllm-r1", "running", "r1"),
        FakeContainer("strix-x", "exited", "r0"),
    )
    client = FakeClient([running, exited])
    found = guards.clean_leftovers(client)
    assert client.containers.filters == {"label": "strix.managed=true"}
    assert [f.run_id for f in found] == ["r1", "r0"]
    assert running.stopped and running.removed and exited.removed and not exited.stopped
    assert found[0].status == "running"
    assert guards.clean_leftovers(client) == []


def _listening_socket():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    return s


def test_port_guard():
    s = _listening_socket()
    port = s.getsockname()[1]
    try:
        assert guards.port_in_use("127.0.0.1", port)
        start = time.monotonic()
        with pytest.raises(EngineStartError, match=f"port {port}"):
            guards.check_port_free("127.0.0.1", port, wait_s=0.3, interval_s=0.1)
        assert time.monotonic() - start < 3
    finally:
        s.close()
    guards.check_port_free("127.0.0.1", port, wait_s=1, interval_s=0.1)


def test_baseline_guard_waits_then_passes_or_fails_with_numbers():
    values = iter([9 * GB, 7 * GB, 5 * GB + GB // 2])
    got = guards.wait_for_baseline(lambda: next(values), 5 * GB, GB, wait_s=2, interval_s=0.01)
    assert got == 5 * GB + GB // 2
    with pytest.raises(EngineStartError) as e:
        guards.wait_for_baseline(lambda: 9 * GB, 5 * GB, GB, wait_s=0.2, interval_s=0.05)
    assert e.value.status == "failed_guard"
    assert "9.00 GB" in e.value.reason and "5.00 GB" in e.value.reason and "1.00 GB" in e.value.reason


def test_preflight_full_order_with_fakes():
    h = host(idle_baseline_gb=4, baseline_tolerance_gb=1)
    spec = build_spec(EngineConfig(kind="llamacpp"), sglang_profile(), "/m", port=_free_port())
    client = FakeClient([FakeContainer("strix-llamacpp-crashed", "running", "crashed")])
    readings = iter([8 * GB, 4 * GB + 10])
    result = guards.preflight(h, spec, client=client, read_in_use=lambda: next(readings), interval_s=0.01)
    assert [x.run_id for x in result.leftovers] == ["crashed"]
    assert "strix-llamacpp-crashed" in result.leftovers_note()
    assert result.baseline_bytes == 4 * GB and result.in_use_bytes == 4 * GB + 10
    # no configured baseline: the reading before start is the baseline
    result = guards.preflight(host(), spec, read_in_use=lambda: 123)
    assert result.baseline_bytes == 123 and result.leftovers == [] and result.leftovers_note() is None


def test_after_stop_flags_memory_that_does_not_return():
    h = host(after_stop_timeout_s=0.2, baseline_tolerance_gb=1)
    assert guards.after_stop(h, lambda: 3 * GB, 2 * GB + GB // 2, interval_s=0.05) == (True, 3 * GB)
    returned, value = guards.after_stop(h, lambda: 9 * GB, 2 * GB, interval_s=0.05)
    assert returned is False and value == 9 * GB
    assert guards.after_stop(h, lambda: 1, None) == (None, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scripted(values):
    """read_in_use from a script; the last value repeats (memory stays where it ended)."""
    it = iter(values)
    last = [None]

    def read():
        try:
            last[0] = next(it)
        except StopIteration:
            pass
        return last[0]

    return read


def test_without_a_configured_baseline_memory_is_waited_on_until_it_settles():
    # production's memory is still being freed after its stop: 30, 20, 12 GB, then steady near 8 GB
    read = _scripted([30 * GB, 20 * GB, 12 * GB, 8 * GB + GB // 10, 8 * GB, 8 * GB + GB // 5, 8 * GB])
    got = guards.wait_for_settled(read, GB // 2, wait_s=5, interval_s=0.01, settle_s=0.02)
    assert got.settled and got.note is None
    assert got.value == 8 * GB + GB // 5  # the third reading in a row within 0.5 GB, not the first 30 GB


def test_a_gap_in_the_readings_restarts_the_settling_window():
    read = _scripted([5 * GB, 5 * GB, None, 5 * GB, 5 * GB, 5 * GB])
    calls = []
    got = guards.wait_for_settled(
        lambda: calls.append(1) or read(), GB, wait_s=5, interval_s=0.01, settle_s=0
    )
    assert got.settled and got.value == 5 * GB and len(calls) == 6


def test_memory_that_never_settles_proceeds_with_a_note_and_the_loop_is_bounded():
    counter = iter(range(10_000))
    read = lambda: next(counter) * 2 * GB  # noqa: E731 - climbs 2 GB per reading, over any tolerance
    start = time.monotonic()
    got = guards.wait_for_settled(read, GB, wait_s=0.2, interval_s=0.01, settle_s=0.03)
    assert time.monotonic() - start < 2
    assert not got.settled and got.value is not None and got.value > 0
    assert "did not settle within 1.00 GB" in got.note and "baseline is the last reading" in got.note
    none = guards.wait_for_settled(lambda: None, GB, wait_s=0.1, interval_s=0.01)
    assert none.value is None and "no memory reading" in none.note


def test_preflight_without_config_uses_the_settled_reading_and_records_when_it_did_not_settle():
    spec = build_spec(EngineConfig(kind="llamacpp"), sglang_profile(), "/m", port=_free_port())
    h = host(baseline_wait_s=5, baseline_tolerance_gb=1)
    read = _scripted([40 * GB, 25 * GB, 9 * GB, 9 * GB, 9 * GB])
    pre = guards.preflight(h, spec, read_in_use=read, interval_s=0.01, settle_s=0.02)
    assert pre.baseline_bytes == pre.in_use_bytes == 9 * GB and pre.baseline_note is None
    assert pre.notes() is None
    counter = iter(range(10_000))
    climbing = lambda: next(counter) * 3 * GB  # noqa: E731
    pre = guards.preflight(
        host(baseline_wait_s=0.1), spec, read_in_use=climbing, interval_s=0.01, settle_s=0.02
    )
    assert pre.baseline_note and "did not settle" in pre.baseline_note
    assert pre.notes() == pre.baseline_note  # what the runner records on the run
    pre.leftovers = [guards.Leftover("abc", "strix-old", "img", "r0", "running")]
    assert pre.notes().startswith("leftover managed containers removed") and "did not settle" in pre.notes()
