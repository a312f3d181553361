"""Production as deployed is the baseline, on the Box simulator over the real ``ssh://`` path.

Production is a real llama-server container of its own (a Vulkan-tagged image in the loopback registry,
its own flags, environment and model mount). The pipeline reads it read-only (`strix production show`),
derives the baseline and runs it: the launched container's arguments (read from Docker while it serves)
are production's except where it listens, its image is production's by digest, its model file is
production's, and the run records "production as deployed" with the read's digest. Then production is
restarted with another context size: `strix doctor` says it changed, and the next baseline has it.

The same with production as a systemd-style command: a unit whose ExecStart is ``docker run … IMAGE
…`` (a stand-in ``systemctl`` on the Box's PATH, support/fake_systemd.py, shows it and stops and starts
it): the baseline runs that image, those arguments and that model file.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bench_docker import HOST, managed, remove_left_behind
from support.box_images import ProductionWatch, push_image
from support.box_sim import KEY_ENV, BoxSim, box_config, wait_healthy
from support.fake_systemd import FakeUnit
from support.infra import free_port
from support.llama_image import llama_rootfs

from strix_pipeline.cli import build_parser
from strix_pipeline.cli.production import read_host, run_show
from strix_pipeline.config import StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import failed, run_checks
from strix_pipeline.fingerprint import backend_family
from strix_pipeline.hosts.docker.host import make_client
from strix_pipeline.hosts.guards import RUN_LABEL
from strix_pipeline.planning.production_baseline import derive_baseline
from strix_pipeline.planning.production_target import baseline_choice, production_target
from strix_pipeline.records import RunRecord
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.runner.as_deployed import production_for
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

RUN_ID = "asdeployed-baseline"
REPO, TAG = "ggml-org/llama.cpp", "server-vulkan"
NAME = "strix-test-asdeployed-production"
ENV = ["GGML_VK_VISIBLE_DEVICES=0"]


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_ID)
    assert not left, f"containers left behind: {left}"


def production_flags(model_in_container: str, ctx: int, port: int) -> list[str]:
    """Production's own settings, none of them the pipeline's profile's (-c 512 x 2 slots there)."""
    return [
        "-m", model_in_container, "--alias", "prod-gemma", "-c", str(ctx), "-np", "1", "-t", "2",
        "-b", "256", "-ub", "128", "-ctk", "q8_0", "--load-mode", "none", "--metrics", "-lv", "4",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


def start_production(client, image: str, binary: Path, model_path: Path, ctx: int, port: int):
    in_container = f"/models/{model_path.name}"
    return client.containers.run(
        image,
        production_flags(in_container, ctx, port),
        entrypoint=[str(binary)],
        environment=ENV,
        volumes={str(model_path): {"bind": in_container, "mode": "ro"}},
        network_mode="host",
        detach=True,
        name=NAME,
    )


def without_listen(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--host", "--port"):
            skip = True
        else:
            out.append(a)
    return out


def run_baseline(client, config: StrixConfig, target: BenchmarkTarget, run_id: str) -> tuple[RunRecord, dict]:
    """One run of ``target`` on the simulated Box; its engine container as Docker had it while it served."""
    launched: dict = {}

    def log(line: str) -> None:
        if " ready at " in line:  # the baseline serves: read its container as Docker has it
            (c,) = client.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"})
            launched.update(c.attrs)

    result = run_benchmark(config, target, run_id=run_id, log=log, force=True, scenarios=["smoke"])
    assert managed(run_id) == []
    run = result.run
    assert run.status == "ok", (run.status, run.failure_reason, run.log_tail)
    assert launched, "the engine container was never seen serving"
    return run, launched


def with_runs(config: StrixConfig) -> StrixConfig:
    """The Box benchmarks the baseline engine with production's model: the profile the baseline's run
    takes its family and reserve from (the file and the flags are production's)."""
    data = config.model_dump()
    data["runs"] = {HOST: [{"engine": "llamacpp", "model": "gemma", "profile": "tiny"}]}
    return StrixConfig.model_validate(data)


def doctor_check(config: StrixConfig) -> str:
    checks = run_checks(config, start_engines=False)
    found = [c for c in checks if c.name == "production as deployed"]
    assert len(found) == 1, checks
    (check,) = found
    return check.detail


def test_the_baseline_runs_production_as_deployed_and_doctor_sees_it_change(
    llama, model_path, box_sshd, box_key, box_probe_image, client, tmp_path, monkeypatch
):
    pushed = push_image(llama.registry, REPO, TAG, llama_rootfs(llama.binary))
    image = f"{llama.registry.host}/{REPO}:{TAG}"
    client.images.pull(f"{llama.registry.host}/{REPO}", tag=TAG)
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    production = start_production(client, image, llama.binary, model_path, 1024, port)
    try:
        wait_healthy(url, 120)
        sim = BoxSim.build(tmp_path / "box")
        sim.install(monkeypatch, box_probe_image)
        config = with_runs(
            box_config(
                tmp_path,
                llama,
                model_path,
                box_sshd,
                production={"container": NAME, "health_url": url, "health_timeout_s": 120},
            )
        )

        # `strix production show`: read over ssh, printed, stored
        args = argparse.Namespace(host=None, warehouse=None, config=None, _strix_config=config)
        assert run_show(args) == 0
        read = read_host(config, HOST)
        base = derive_baseline(read)
        assert base.image_ref == f"{llama.registry.host}/{REPO}@{pushed.digest}"
        assert base.backend == "vulkan" and base.model_on_host == str(model_path)
        assert doctor_check(config).startswith("unchanged since the read of")

        target = production_target(config, HOST, base)
        assert target.image is not None
        assert backend_family(target.image.repository, target.image.tag) == "vulkan"
        with ProductionWatch(NAME) as watch:
            run, launched = run_baseline(client, config, target, RUN_ID)
        assert watch.states == ["running", "exited", "running"]  # stopped for the run, restored
        assert run.baseline_source == f"production as deployed ({read.digest})"
        assert run.image_digest == pushed.digest and run.image_tag == TAG

        prod = client.api.inspect_container(NAME)
        cfg = launched["Config"]
        assert cfg["Entrypoint"] == prod["Config"]["Entrypoint"]
        # production's arguments exactly, but for where it listens
        assert without_listen(cfg["Cmd"]) == without_listen(prod["Config"]["Cmd"])
        assert cfg["Cmd"][cfg["Cmd"].index("--port") + 1] != str(port)
        assert launched["Image"] == prod["Image"]  # the same image, by id
        assert set(ENV) <= set(cfg["Env"])
        binds = {m["Destination"]: m["Source"] for m in launched["Mounts"]}
        assert binds[f"/models/{model_path.name}"] == str(model_path)  # the same model file

        # production changes its context size: doctor says so, and the next baseline has it
        production.remove(force=True)
        production = start_production(client, image, llama.binary, model_path, 2048, port)
        wait_healthy(url, 120)
        said = doctor_check(config)
        assert "production CHANGED since the read of" in said and "-c 1024 -> 2048" in said, said
        again = derive_baseline(read_host(config, HOST))
        assert ("context", "2048") in again.settings and again.read_digest != read.digest
        with Warehouse.open(config.project.warehouse, read_only=True) as wh:
            stored = wh.last_production_read(HOST)
        assert stored is not None and stored.digest == read.digest  # doctor only reads; show records

        # the week's next run of production's image and model file (a plain target, as the night plans
        # it) runs as production is deployed now
        plain = BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", pushed.record())
        nxt, launched = run_baseline(client, config, plain, RUN_ID + "-next")
        assert nxt.baseline_source == f"production as deployed ({again.read_digest})"
        cmd = launched["Config"]["Cmd"]
        assert cmd[cmd.index("-c") + 1] == "2048" and "prod-gemma" in cmd, cmd
        assert without_listen(cmd) == without_listen(client.api.inspect_container(NAME)["Config"]["Cmd"])
    finally:
        production.remove(force=True)
        pushed.remove()


def test_box_init_writes_a_configuration_doctor_accepts_whose_baseline_is_production(
    llama, model_path, box_sshd, box_key, client, tmp_path, monkeypatch
):
    """`strix box init ssh://user@box` against the simulator: production found by itself (the one
    running llama-server container), the written file loads, `strix doctor` finds nothing required
    missing, and a run of production's image and model file runs as production deploys it."""
    pushed = push_image(llama.registry, REPO, TAG, llama_rootfs(llama.binary))
    image = f"{llama.registry.host}/{REPO}:{TAG}"
    client.images.pull(f"{llama.registry.host}/{REPO}", tag=TAG)
    port = free_port()
    production = start_production(client, image, llama.binary, model_path, 1024, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", 120)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("STRIX_BOX_USER", box_sshd.user)
        out = tmp_path / "strix.toml"
        argv = ["box", "init", box_sshd.url, "--out", str(out), "--key-env", KEY_ENV]
        args = build_parser().parse_args([*argv, "--known-hosts", str(box_sshd.known_hosts)])
        assert args.func(args) == 0
        config = load_config(str(out))
        assert baseline_choice(config) == "production as deployed"
        (host,) = config.hosts
        box = config.docker_config(host)
        assert box.production is not None and box.production.container == NAME
        (profile,) = config.models.values()
        assert profile.path == str(model_path) and profile.parallel == 1 and profile.context_length == 1024
        checks = run_checks(config, start_engines=False)
        assert not failed(checks), [c for c in failed(checks)]
        (run,) = config.runs[host]
        target = BenchmarkTarget(host, "llamacpp", run.model, run.profile, pushed.record())
        c = make_client(box)
        try:
            deployed = production_for(config, target, c, lambda line: None)
        finally:
            c.close()
        assert deployed is not None and deployed.backend == "vulkan", out.read_text()
    finally:
        production.remove(force=True)
        pushed.remove()


UNIT = "llama-prod.service"
UNIT_NAME = NAME + "-unit"  # its own container name: the container test's may run beside it


def unit_healthy(unit: FakeUnit, url: str) -> None:
    try:
        wait_healthy(url, 120)
    except AssertionError as e:
        raise AssertionError(f"{e}; the unit's log:\n{unit.log()[-3000:]}") from None


# what the unit's --env-file holds: a value of its own, and one its -e replaces
FROM_FILE = "STRIX_TEST_FROM_FILE=the file\nGGML_VK_VISIBLE_DEVICES=7\n"


def env_file() -> Path:
    """The unit's --env-file where the Box's user can read it (tmp_path is root's alone)."""
    far = Path(tempfile.mkdtemp(prefix="strix-envfile-"))
    far.chmod(0o755)
    path = far / "llama.env"
    path.write_text(FROM_FILE)
    path.chmod(0o644)
    return path


def unit_exec_start(image: str, binary: Path, model_path: Path, ctx: int, port: int, env: Path) -> list[str]:
    """A unit's ``docker run`` of production, in the foreground as systemd runs it: an env file and its
    environment passed by name (the unit's value, after the file's), its model mounted read-only, its
    entrypoint the binary."""
    in_container = f"/models/{model_path.name}"
    return [
        "docker", "run", "--rm", "--name", UNIT_NAME, "--network", "host", "--env-file", str(env),
        "-e", "GGML_VK_VISIBLE_DEVICES",
        "-v", f"{model_path}:{in_container}:ro", "--entrypoint", str(binary), image,
        *production_flags(in_container, ctx, port),
    ]  # fmt: skip


def test_a_units_docker_run_is_the_baseline_and_doctor_sees_it_change(
    llama, model_path, box_sshd, box_key, box_probe_image, client, tmp_path, monkeypatch
):
    """Production is a systemd unit running ``docker run``: the pipeline reads it with ``systemctl
    show`` over the Box's ssh, resolves the image it names to its digest on the Box's Docker, and the
    baseline run is that image with the unit's arguments, environment and model file; production's
    own stop/start commands take it down for the run and bring it back. Then the unit's flags change:
    `strix doctor` says so, and the next baseline has them."""
    pushed = push_image(llama.registry, REPO, TAG, llama_rootfs(llama.binary))
    image = f"{llama.registry.host}/{REPO}:{TAG}"
    client.images.pull(f"{llama.registry.host}/{REPO}", tag=TAG)
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    unit = FakeUnit.install(box_sshd, UNIT)
    flags = production_flags(f"/models/{model_path.name}", 1024, port)
    envs = env_file()
    try:
        unit.set(
            unit_exec_start(image, llama.binary, model_path, 1024, port, envs),
            env=ENV,
            stop=["docker", "rm", "-f", UNIT_NAME],
        )
        unit.start()
        unit_healthy(unit, url)
        sim = BoxSim.build(tmp_path / "box")
        sim.install(monkeypatch, box_probe_image)
        production = {
            "unit": UNIT,
            "stop_command": ["systemctl", "stop", UNIT],
            "start_command": ["systemctl", "start", UNIT],
            "health_url": url,
            "health_timeout_s": 120,
        }
        config = with_runs(box_config(tmp_path, llama, model_path, box_sshd, production=production))

        args = argparse.Namespace(host=None, warehouse=None, config=None, _strix_config=config)
        assert run_show(args) == 0
        read = read_host(config, HOST)
        assert read.kind == "unit" and read.name == UNIT and read.image == image
        assert read.argv == (str(llama.binary), *flags)  # the unit's entrypoint and arguments
        # the env file's own variable, and `-e NAME` with the unit's value over the file's
        assert read.env == ("STRIX_TEST_FROM_FILE=the file", *ENV), read.env
        base = derive_baseline(read)
        assert base.image_ref == f"{llama.registry.host}/{REPO}@{pushed.digest}"
        assert base.backend == "vulkan" and base.model_on_host == str(model_path)
        assert [c.what for c in base.changes] == ["--host", "--port"]  # the only differences
        assert doctor_check(config).startswith("unchanged since the read of")

        target = production_target(config, HOST, base)
        assert target.image is not None
        assert backend_family(target.image.repository, target.image.tag) == "vulkan"  # paired as Vulkan
        run, launched = run_baseline(client, config, target, RUN_ID + "-unit")
        unit_healthy(unit, url)  # production's own start command brought it back
        assert run.baseline_source == f"production as deployed ({read.digest})"
        assert run.image_digest == pushed.digest and run.image_tag == TAG

        prod = client.api.inspect_container(UNIT_NAME)  # the unit's container, running again
        cfg = launched["Config"]
        assert cfg["Entrypoint"] == [str(llama.binary)]
        assert without_listen(cfg["Cmd"]) == without_listen(flags)  # the unit's arguments exactly
        assert cfg["Cmd"][cfg["Cmd"].index("--port") + 1] != str(port)
        assert launched["Image"] == prod["Image"]  # the image the unit runs, by id
        assert {*ENV, "STRIX_TEST_FROM_FILE=the file"} <= set(cfg["Env"])
        assert {*ENV, "STRIX_TEST_FROM_FILE=the file"} <= set(prod["Config"]["Env"])  # as production has it
        binds = {m["Destination"]: m["Source"] for m in launched["Mounts"]}
        assert binds[f"/models/{model_path.name}"] == str(model_path)  # the same model file

        # the unit's flags change (-c 2048) and it is restarted: doctor says so, the next baseline has it
        unit.set(
            unit_exec_start(image, llama.binary, model_path, 2048, port, envs),
            env=ENV,
            stop=["docker", "rm", "-f", UNIT_NAME],
        )
        unit.stop()
        unit.start()
        unit_healthy(unit, url)
        said = doctor_check(config)
        assert "production CHANGED since the read of" in said and "-c 1024 -> 2048" in said, said
        again = derive_baseline(read_host(config, HOST))
        assert ("context", "2048") in again.settings and again.read_digest != read.digest
        plain = BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", pushed.record())
        nxt, launched = run_baseline(client, config, plain, RUN_ID + "-unit-next")
        unit_healthy(unit, url)
        assert nxt.baseline_source == f"production as deployed ({again.read_digest})"
        cmd = launched["Config"]["Cmd"]
        assert cmd[cmd.index("-c") + 1] == "2048" and "prod-gemma" in cmd, cmd
    finally:
        unit.remove()
        if client.containers.list(all=True, filters={"name": f"^{UNIT_NAME}$"}):
            client.containers.get(UNIT_NAME).remove(force=True)
        pushed.remove()
        shutil.rmtree(envs.parent, ignore_errors=True)
