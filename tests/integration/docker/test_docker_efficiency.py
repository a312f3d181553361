"""Decode efficiency on a Docker host: ``run_benchmark`` of the real llama-server image on this machine's
dockerd, with the host's ``efficiency_probe_image`` a real python3 + numpy image assembled here
(tests/support/python_image.py: nothing downloaded).

1. The probe container runs once, before the engine, offline, with the model mounted read-only, and
   is gone after: the run stores the bandwidth with llama-server's ``-t``, the model's weight bytes
   and KV per token as the GGUF's header gives them, and the figure recomputed from those inputs.
2. The busybox probe image (no python3) costs the figure, not the run: the run is ``ok``, its decode
   speed is stored, and ``efficiency_problem`` says the probe did not start for want of python3.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import docker
import pytest
from conftest import need
from support.bench_docker import DOCKER_HOST, HOST, assert_served, make_config, run, target
from support.gguf_files import F32, write_split
from support.python_image import python_numpy_image, python_parts

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.hosts.probes.efficiency import PROBE_NAME, measure_on_host
from strix_pipeline.memory.bytes_per_token import from_gguf
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.llama, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def python_numpy(docker_engine: None) -> Iterator[str]:
    parts = python_parts()
    need(parts is not None, "numpy in the project's environment", "pip install -e .")
    assert parts is not None
    with python_numpy_image(parts) as tag:  # checks that python3 in it imports numpy
        yield tag


def probes_named() -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            "label=strix.probe=true",
            "--filter",
            f"name={PROBE_NAME}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return out.split()


@pytest.fixture(autouse=True)
def no_probe_left(docker_engine: None) -> Iterator[None]:
    yield
    left = probes_named()
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert not left, f"efficiency probe containers left behind: {left}"


def probe_events(since: float) -> list[tuple[str, str]]:
    """(action, image) of the efficiency probe's container events since ``since`` (unix seconds)."""
    out = subprocess.run(
        [
            "docker",
            "events",
            "--since",
            f"{since:.3f}",
            "--until",
            f"{time.time() + 1:.3f}",
            "--filter",
            "type=container",
            "--filter",
            "label=strix.probe=true",
            "--filter",
            f"container={PROBE_NAME}",
            "--format",
            "{{json .}}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [(e["Action"], e["Actor"]["Attributes"].get("image", "")) for e in events]


def with_probe_image(config: StrixConfig, image: str) -> StrixConfig:
    host = config.hosts[HOST].model_copy(update={"efficiency_probe_image": image})
    return config.model_copy(update={"hosts": {**config.hosts, HOST: host}})


def test_a_docker_hosts_run_stores_the_bandwidth_the_model_bytes_and_the_figure(
    llama, model_path, tmp_path, python_numpy
):
    config = with_probe_image(make_config(tmp_path, llama, model_path), python_numpy)
    lines: list[str] = []
    since = time.time()
    result = run(config, target(llama), "eff-docker", log=lines.append, scenarios=None)  # smoke + sweep
    assert_served(result, sweep=True)
    events = probe_events(since)
    actions = [a for a, _ in events]
    # one container of the probe image, created, run to its end and removed -- before the engine
    assert actions.count("create") == 1 and "destroy" in actions, events
    assert {img for _, img in events} == {python_numpy}, events
    bandwidth_at = next(i for i, line in enumerate(lines) if "memory bandwidth: " in line)
    ready_at = next(i for i, line in enumerate(lines) if " ready at " in line)
    assert bandwidth_at < ready_at, lines
    assert "(2 threads, numpy.copyto float64" in lines[bandwidth_at], lines[bandwidth_at]

    expected = from_gguf(model_path)  # the header, read here: the probe read it in the container
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_run(result)
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        [row] = wh.query_df(
            "SELECT bandwidth_bytes_per_s, bandwidth_threads, model_weight_bytes, kv_bytes_per_token, "
            "decode_tok_s, decode_context_tokens, decode_efficiency, efficiency_problem "
            "FROM runs WHERE run_id = ?",
            ["eff-docker"],
        ).to_dicts()
    assert row["bandwidth_bytes_per_s"] > 1e9, row  # any DRAM copies more than 1 GB/s
    assert row["bandwidth_threads"] == 2, row  # llama-server's -t 2 (support/bench_docker.py GOOD_FLAGS)
    assert (row["model_weight_bytes"], row["kv_bytes_per_token"]) == (
        expected.weight_bytes,
        expected.kv_bytes_per_token,
    )
    assert row["decode_tok_s"] > 0 and row["decode_context_tokens"] > 0, row
    figure = (
        row["decode_tok_s"]
        * expected.bytes_per_token(row["decode_context_tokens"])
        / row["bandwidth_bytes_per_s"]
    )
    if figure <= 1:
        assert row["efficiency_problem"] is None, row
        assert row["decode_efficiency"] == pytest.approx(figure) and 0 < row["decode_efficiency"] <= 1, row
    else:  # the weights in a cache the copy probe does not reach: said, not stored
        assert row["decode_efficiency"] is None and row["efficiency_problem"].startswith("above 1"), row
    print(
        f"bandwidth {row['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s with {row['bandwidth_threads']} threads, "
        f"decode {row['decode_tok_s']:.1f} tok/s at {row['decode_context_tokens']:.0f} tokens, "
        f"{expected.bytes_per_token(row['decode_context_tokens']) / 1e6:.1f} MB/token -> {figure:.3f}"
    )


def test_a_probe_image_without_python_costs_the_figure_not_the_run(llama, model_path, tmp_path, busybox):
    config = with_probe_image(make_config(tmp_path, llama, model_path), busybox)
    since = time.time()
    result = run(config, target(llama), "eff-busybox", scenarios=None)
    assert_served(result, sweep=True)
    r = result.run
    assert r.decode_tok_s and r.decode_tok_s > 0  # the speed is stored all the same
    assert r.decode_efficiency is None and r.bandwidth_bytes_per_s is None and r.model_weight_bytes is None
    problem = r.efficiency_problem or ""
    assert problem.startswith(f"efficiency probe in {busybox} did not start: "), problem
    assert "python3" in problem and problem.endswith(
        "(the image needs python3 with numpy); no bandwidth probe"
    )
    actions = [a for a, _ in probe_events(since)]
    assert "create" in actions and "destroy" in actions, actions  # it was tried, and removed


def test_the_probe_reads_every_part_of_a_split_gguf(python_numpy, tmp_path):
    """gpt-oss-120b's GGUF comes as three files: the probe container gets every part mounted beside
    the first and counts the weights of all of them, not the first's third."""
    models = tmp_path / "models"
    models.mkdir()
    meta = {
        "general.architecture": "toy",
        "toy.block_count": 2,
        "toy.embedding_length": 64,
        "toy.attention.head_count": 4,
        "toy.attention.head_count_kv": 2,
    }
    tensors = [(f"blk.{i}.ffn.weight", [64, 64], F32) for i in range(6)]
    first, *_ = write_split(models, meta, tensors, parts=3)
    host = DockerHostConfig.model_validate(
        {
            "kind": "docker",
            "docker_host": DOCKER_HOST,
            "models_dir": str(models),
            "efficiency_probe_image": python_numpy,
        }
    )
    client = docker.DockerClient(base_url=DOCKER_HOST)
    try:
        _, found, why = measure_on_host(client, host, 1, first.name, size_mib=8, time_budget_s=0.5)
    finally:
        client.close()
    assert why is None and found is not None, why
    assert found.weight_bytes == from_gguf(first).weight_bytes == 6 * 64 * 64 * 4
    assert found.details["parts"] == 3
