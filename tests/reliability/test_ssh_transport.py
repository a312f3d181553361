"""The Box path over a real ``ssh://`` transport: an sshd on loopback in front of this machine's dockerd.

The sshd (tests/support/sshd.py, Debian openssh-server) accepts only a key the test made; the host is
``kind = "docker"``, ``docker_host = "ssh://strix-box@127.0.0.1:<port>"`` (the test user of
tests/support/sshd.py), the key in ``$STRIX_TEST_SSH_KEY`` (the host's ``ssh_key_path_env``), the host key
in the test's known_hosts file, the memory probe a busybox image. Every Docker call of the run -- pull,
start, logs, the probe, the leftover guard, the cleanup -- goes through ``ssh … docker system dial-stdio``
(strix_pipeline/hosts/docker/ssh.py); the engine is the real llama-server image from the loopback registry
(tests/support/llama_image.py), its HTTP port reached directly, as the Box's are.

Faults: the ssh sessions killed in the middle of the suite (the server keeps listening), the whole
sshd stopped in the middle of the suite and started again after the run, a key the server does
not accept, a host key the known_hosts file does not have, a key variable naming no file.

Run under ``flock /tmp/strix-docker.lock``: the leftover guard removes every managed container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, managed, target
from support.infra import build_image, remove_image
from support.llama_image import LlamaImage
from support.paths import REPO
from support.sshd import Sshd, keygen, sshd_available, start_sshd

from strix_pipeline.config import DockerHostConfig, ProductionEngine, StrixConfig
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.docker.ssh import docker_client, ssh_target
from strix_pipeline.records import RunResult
from strix_pipeline.runner import run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(400),
]

KEY_ENV = "STRIX_TEST_SSH_KEY"
# the keys' directory: its name is distinctive, as the key path is a secret no record may hold
SECRET_DIR = "secret-sshkeys-5d1e"
PROBE = "strix-test/ssh-busybox:1"
RUN_PREFIX = "ssh-"
# a run that lost the Box ends in bounded time after the drop (the rest of the suite, which needs no
# ssh, the failed cleanup, the after-stop check): far below docker-py's 300 s call timeout
AFTER_DROP_S = 90


@pytest.fixture(scope="module")
def sshd(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    need(
        sshd_available(),
        "the OpenSSH server and client (/usr/sbin/sshd, ssh, ssh-keygen)",
        "apt-get install openssh-server openssh-client",
    )
    with start_sshd(tmp_path_factory.mktemp(SECRET_DIR)) as server:
        yield server


@pytest.fixture(scope="module")
def probe_image(docker_engine: None) -> Iterator[str]:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    build_image(PROBE, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX, "/bin/cat": BUSYBOX})
    yield PROBE
    remove_image(PROBE)


@pytest.fixture
def key(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(KEY_ENV, str(sshd.key))
    return sshd.key


def labelled(label: str) -> list[str]:
    argv = ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"label={label}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.split()


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None, sshd: Sshd) -> Iterator[None]:
    yield
    left = [c for c in managed() if c.startswith(f"strix-llamacpp-{RUN_PREFIX}")] + labelled(
        "strix.probe=true"
    )
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    if sshd.process is None:  # a test that failed while its sshd was stopped
        sshd.start()
    assert not left, f"containers left behind: {left}"


def ssh_config(
    tmp_path: Path, llama: LlamaImage, model_path: Path, sshd: Sshd, **host: object
) -> StrixConfig:
    """The Docker-host test config (tests/integration/docker/test_benchmark_docker.py) with its host behind
    the sshd."""
    data = make_config(tmp_path, llama, model_path).model_dump()
    data["hosts"][HOST].update(
        {
            "docker_host": sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(sshd.known_hosts),
            **host,
        }
    )
    return StrixConfig.model_validate(data)


def bench(
    config: StrixConfig, llama: LlamaImage, run_id: str, lines: list[str], **kw
) -> tuple[RunResult, float]:
    started = time.monotonic()
    result = run_benchmark(config, target(llama), run_id=run_id, log=lines.append, force=True, **kw)
    return result, time.monotonic() - started


def measured(result: RunResult) -> list:
    return [q for q in result.requests if q.ok and not q.warmup and q.ttft_ms and q.ttft_ms > 0]


def no_secret_in(result: RunResult, tmp_path: Path, secret: str) -> None:
    r = result.run
    texts = [r.failure_reason or "", r.log_tail or "", r.launch_command or "", r.engine_flags or ""]
    assert not [t for t in texts if secret in t]
    hits = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert hits == []


# ------------------------------------------------------------------ (a) the Box path works


def test_a_benchmark_over_ssh_runs_pulls_measures_and_cleans_up(
    llama, model_path, probe_image, sshd, key, tmp_path
):
    config = ssh_config(tmp_path, llama, model_path, sshd, probe_image=probe_image)
    lines: list[str] = []
    result, took = bench(config, llama, f"{RUN_PREFIX}ok", lines, scenarios=["smoke"])
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail, lines[-5:])
    assert measured(result), result.requests
    assert r.engine_build and "--metrics" in (r.launch_command or "")
    # pulled by digest from the loopback registry through the ssh transport, and logged
    log_text = (config.artifacts_dir() / "logs" / r.run_id / f"{r.run_id}-llamacpp.log").read_text()
    assert f"@{llama.digest}" in log_text and "stopped and removed" in log_text
    assert "log stream cut" not in log_text
    # the probe container read the host's memory over ssh, before, during and after the engine
    assert {"baseline", "bench", "after_stop"} <= {m.phase for m in result.memory}, result.memory
    assert "meminfo" in {m.source for m in result.memory}
    assert managed(r.run_id) == [] and labelled("strix.probe=true") == []
    # every connection went through this sshd: it authenticated the test's key for them (the first
    # dial and the master the others ride)
    assert sshd.log().count("Accepted publickey for") >= 2
    no_secret_in(result, tmp_path, SECRET_DIR)
    print(
        f"ssh run ok in {took:.1f} s, {len(measured(result))} requests, {len(result.memory)} memory samples"
    )


# ------------------------------------------------------------------ (b) the connection drops mid-run


def drop_after_first_level(lines: list[str], drop) -> object:
    """A run's log callback that drops the connection once the suite reported its first level."""

    class Log:
        dropped_at: float | None = None

        def __call__(self, line: str) -> None:
            lines.append(line)
            if self.dropped_at is None and "concurrency_sweep" in line:
                drop()  # synchronously: the suite goes on only once the connection is gone
                self.dropped_at = time.monotonic()

    return Log()


def test_killed_ssh_sessions_mid_suite_are_recorded_and_the_run_still_cleans_up(
    llama, model_path, sshd, key, tmp_path
):
    config = ssh_config(tmp_path, llama, model_path, sshd)
    lines: list[str] = []
    killed: list[int] = []
    logger = drop_after_first_level(lines, lambda: killed.append(sshd.drop_sessions()))
    started = time.monotonic()
    result = run_benchmark(config, target(llama), run_id=f"{RUN_PREFIX}cut", log=logger, force=True)
    took = time.monotonic() - started
    r = result.run
    assert killed and killed[0] > 0, "no ssh session to kill: the run did not talk ssh mid-suite"
    assert logger.dropped_at is not None and time.monotonic() - logger.dropped_at < AFTER_DROP_S
    # the engine kept serving (its port is reached directly) but the run lost its host mid-way: the
    # same as a killed engine -- the suite stops there, failed_serve with the measurements kept
    assert r.status == "failed_serve", (r.status, r.failure_reason, lines[-5:])
    reason = r.failure_reason or ""
    assert "the engine kept running, but the run lost the ssh connection to the Docker host" in reason
    assert sshd.url in reason and "closed by remote host" in reason, reason
    assert measured(result)
    # the suite stopped at the next level, as for a killed engine: level 1 kept, level 2 never sent
    levels = {a.level for a in result.aggregates if a.scenario == "concurrency_sweep"}
    assert levels == {1}, result.aggregates
    assert "during concurrency_sweep level 2" in reason, reason
    # the engine's log says where it was cut; ssh was back for the cleanup, which removed the engine
    log_text = (config.artifacts_dir() / "logs" / r.run_id / f"{r.run_id}-llamacpp.log").read_text()
    assert "log stream cut: ssh" in log_text and "stopped and removed" in log_text
    assert managed(r.run_id) == []
    no_secret_in(result, tmp_path, SECRET_DIR)
    print(f"sessions killed ({killed[0]} processes): {r.status} in {took:.1f} s: {reason}")


@pytest.mark.parametrize("fault", ["stopped", "frozen"])
def test_sshd_gone_mid_suite_fails_bounded_and_the_next_run_removes_the_engine_and_runs(
    fault, llama, model_path, probe_image, sshd, key, tmp_path
):
    # "frozen": nothing answers and nothing is closed -- only the keepalives (3 x 1 s) and the
    # connect timeout (3 s) end the waits; "stopped": connections closed, then refused
    config = ssh_config(
        tmp_path,
        llama,
        model_path,
        sshd,
        probe_image=probe_image,
        ssh_connect_timeout_s=3,
        ssh_alive_interval_s=1,
    )
    lines: list[str] = []
    logger = drop_after_first_level(lines, sshd.stop if fault == "stopped" else sshd.freeze)
    run_id = f"{RUN_PREFIX}{fault}"
    started = time.monotonic()
    try:
        result = run_benchmark(config, target(llama), run_id=run_id, log=logger, force=True)
        took = time.monotonic() - started
        # nothing could remove the engine while the Box was unreachable: it is still there ...
        assert managed(run_id) == [f"strix-llamacpp-{run_id}"]
    finally:
        sshd.thaw() if fault == "frozen" else sshd.start()
    r = result.run
    assert logger.dropped_at is not None
    after_drop = started + took - logger.dropped_at
    assert after_drop < AFTER_DROP_S, f"{after_drop:.0f} s with the Box unreachable"
    assert r.status == "failed_serve", (r.status, r.failure_reason)  # as a killed engine's run
    reason = r.failure_reason or ""
    assert "the Docker host is unreachable: the run lost the ssh connection" in reason, reason
    assert sshd.url in reason and "memory after stop not checked" in reason, reason
    # ssh's own words: refused, or a server that does not answer (keepalives or the banner timed out)
    said = ("Connection refused",) if fault == "stopped" else ("not responding", "timed out")
    assert any(w in reason for w in said), reason
    assert measured(result)  # what was measured before and after the drop is kept

    # ... until ssh is back and the next run's leftover guard removes it
    nxt, took_next = bench(config, llama, f"{RUN_PREFIX}after-{fault}", lines, scenarios=["smoke"])
    n = nxt.run
    assert n.status == "ok", (n.status, n.failure_reason, n.log_tail)
    assert measured(nxt)
    assert "leftover managed containers removed before start" in (n.failure_reason or "")
    assert r.run_id in (n.failure_reason or "")
    assert [c for c in managed() if RUN_PREFIX in c] == []
    assert labelled("strix.probe=true") == []  # the probe the first run could not remove is gone too
    no_secret_in(result, tmp_path, SECRET_DIR)
    print(
        f"sshd {fault}: {r.status} in {took:.1f} s ({after_drop:.1f} s after the drop): {reason}; "
        f"next run ok in {took_next:.1f} s"
    )


# ------------------------------------------------------------------ (c) refused before anything runs


@pytest.fixture
def stranger_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keygen(tmp_path_factory.mktemp(SECRET_DIR) / "not_authorized", "strix-test-stranger")


@pytest.mark.parametrize("fault", ["wrong key", "unknown host key", "no key file"])
def test_a_refused_connection_is_a_clear_failed_guard_naming_the_host_and_the_key_variable(
    fault, llama, model_path, sshd, key, stranger_key, tmp_path, monkeypatch
):
    host: dict[str, object] = {}
    if fault == "wrong key":
        monkeypatch.setenv(KEY_ENV, str(stranger_key))
        expect = "Permission denied (publickey)"
    elif fault == "unknown host key":
        other = tmp_path / "known_hosts"
        other.write_text("")  # a known_hosts file without this host's key
        host["ssh_known_hosts"] = str(other)
        expect = "Host key verification failed"
    else:
        monkeypatch.setenv(KEY_ENV, str(stranger_key.parent / "missing"))
        expect = f"${KEY_ENV} (the ssh key for {sshd.url}) names no readable file"
    config = ssh_config(tmp_path, llama, model_path, sshd, **host)
    result, took = bench(config, llama, f"{RUN_PREFIX}refused", [], scenarios=["smoke"])
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "failed_guard", (r.status, reason)
    assert expect in reason and sshd.url in reason, reason
    if fault != "no key file":
        assert f"the key in ${KEY_ENV}" in reason, reason
    assert took < 30, f"{took:.0f} s to refuse"
    assert result.requests == [] and managed() == []
    no_secret_in(result, tmp_path, SECRET_DIR)


# ------------------------------------------------------------------ the production commands too


def test_production_stop_and_start_commands_run_over_the_same_ssh(sshd, key, tmp_path):
    host = DockerHostConfig(
        kind="docker", docker_host=sshd.url, ssh_key_path_env=KEY_ENV, ssh_known_hosts=str(sshd.known_hosts)
    )
    # written by the Box's user on the far side: not in tmp_path, which is root's alone
    far = Path(tempfile.mkdtemp(prefix="strix-prod-"))
    far.chmod(0o777)
    marks = far / "prod"
    production = ProductionEngine(
        stop_command=["sh", "-c", f"echo $SSH_CONNECTION > {marks}.stopped"],
        start_command=["sh", "-c", f"echo $SSH_CONNECTION > {marks}.started"],
        unit="llama-server.service",
        health_url="http://127.0.0.1:9/health",
        health_timeout_s=5,
    )
    # "healthy" once the start command ran on the far side of the ssh connection
    guard = ProductionGuard(
        "box",
        production,
        state_dir=tmp_path,
        ssh=ssh_target(host),
        healthy=lambda _url: Path(f"{marks}.started").exists(),
        poll_interval_s=0.1,
    )
    with guard:
        # $SSH_CONNECTION is "client-ip client-port server-ip server-port": run by this sshd
        assert Path(f"{marks}.stopped").read_text().split()[-1] == str(sshd.port)
    assert guard.restored is True
    assert Path(f"{marks}.started").read_text().split()[-1] == str(sshd.port)
    shutil.rmtree(far, ignore_errors=True)


# ------------------------------------------------------------------ `strix doctor` over the same ssh


def test_doctor_reaches_docker_over_ssh_and_names_the_key_variable_when_refused(
    llama, model_path, probe_image, sshd, key, stranger_key, tmp_path, monkeypatch
):
    from strix_pipeline import doctor

    config = ssh_config(tmp_path, llama, model_path, sshd, probe_image=probe_image)
    config = StrixConfig.model_validate(
        {**config.model_dump(), "runs": {HOST: [{"engine": "llamacpp", "model": "gemma", "profile": "tiny"}]}}
    )
    checks = {c.name: c for c in doctor.run_checks(config, start_engines=False) if c.host == HOST}
    assert checks["ssh key"].ok and checks["ssh key"].detail == f"${KEY_ENV} is set"
    reach = checks["docker reachable"]
    assert reach.ok and reach.detail.startswith(f"{sshd.url}: Docker "), reach
    assert checks["probe image"].ok

    monkeypatch.setenv(KEY_ENV, str(stranger_key))
    started = time.monotonic()
    checks = {c.name: c for c in doctor.run_checks(config, start_engines=False) if c.host == HOST}
    reach = checks["docker reachable"]
    assert not reach.ok and reach.required and time.monotonic() - started < 30
    assert "Permission denied (publickey)" in reach.detail and f"${KEY_ENV}" in reach.detail, reach
    assert str(stranger_key) not in reach.detail and SECRET_DIR not in reach.detail


# ------------------------------------------------------------ one shared connection, gone with its owner

# A controller that opens a client, runs one exec through it and is killed before it can close
# anything: it prints its master's control socket first.
KILLED_CONTROLLER = """
import os, signal, sys
from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.docker.ssh import docker_client, ssh_target
host = DockerHostConfig(kind="docker", docker_host=sys.argv[1], ssh_key_path_env=sys.argv[2],
                        ssh_known_hosts=sys.argv[3])
client = docker_client(ssh_target(host))
box = client.containers.run(sys.argv[4], ["/bin/busybox", "sleep", "600"], detach=True,
                            labels={"strix.probe": "true"}, network_mode="host")
assert box.exec_run(["cat", "/proc/meminfo"]).exit_code == 0
print(box.id, client.transport._master.path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def ssh_processes(control_path: str) -> list[int]:
    """Processes whose command line names ``control_path``: the master and the dials riding it."""
    out = subprocess.run(["pgrep", "-f", control_path], capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def test_the_docker_calls_of_a_client_share_one_ssh_connection_and_it_ends_with_its_owner(
    sshd, key, probe_image, tmp_path
):
    """Each Docker exec takes a new connection (its HTTP connection is hijacked): ten probe reads
    were ten ssh handshakes. They ride one master connection now, whose control socket is in a
    directory only this user can enter; close() ends it, and so does the death of the process that
    opened it (its remote command reads a pipe that process held)."""
    host = DockerHostConfig(
        kind="docker", docker_host=sshd.url, ssh_key_path_env=KEY_ENV, ssh_known_hosts=str(sshd.known_hosts)
    )
    before = sshd.log().count("Accepted publickey for")
    client = docker_client(ssh_target(host))
    box = client.containers.run(
        probe_image,
        ["/bin/busybox", "sleep", "600"],
        detach=True,
        labels={"strix.probe": "true"},
        network_mode="host",
    )
    try:
        for _ in range(10):
            assert box.exec_run(["cat", "/proc/meminfo"]).exit_code == 0
        # the first dial connects on its own while the master authenticates, the rest ride it
        assert sshd.log().count("Accepted publickey for") - before <= 3
        master = client.transport._master
        assert master is not None and master.proc.poll() is None
        assert ssh_processes(master.path) and Path(master.path).is_socket()
        assert Path(master.control_dir).stat().st_mode & 0o777 == 0o700
    finally:
        box.remove(force=True)
        client.close()
    assert master.proc.poll() is not None and not Path(master.control_dir).exists()
    assert ssh_processes(master.path) == []

    # killed: nothing of its ssh outlives it (bounded by the Box answering, not by a timeout)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_CONTROLLER, sshd.url, KEY_ENV, str(sshd.known_hosts), probe_image],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == -9, done.stderr[-2000:]
    container, path = done.stdout.split()
    subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60, check=False)
    deadline = time.monotonic() + 10
    while ssh_processes(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ssh_processes(path) == [], f"ssh outlived its controller: {path}"
