"""The controller as a service: the units' text (this checkout's venv, DAGSTER_HOME, restart on
failure, loopback by default, no secret in them), each ExecStart's executable there, and `strix
controller install --user` writing them and the Dagster instance file into a directory of the test's."""

from __future__ import annotations

import shlex
from pathlib import Path

from support.paths import REPO

from strix_pipeline.cli import main
from strix_pipeline.controller_service import DAEMON, WEBSERVER, Controller, render_units


def _service(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("["):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_the_units_run_this_checkouts_venv_with_dagster_home_and_restart(tmp_path):
    c = Controller(checkout=REPO, dagster_home=tmp_path / "dh", config=tmp_path / "strix.toml")
    units = render_units(c)
    assert set(units) == {WEBSERVER, DAEMON}
    for name, text in units.items():
        s = _service(text)
        argv = shlex.split(s["ExecStart"][0])
        exe = Path(argv[0])
        assert exe.is_absolute() and exe.parent == REPO / ".venv" / "bin", argv
        assert exe.exists(), f"{name}: {exe} is not in this checkout's venv"
        assert argv[-2:] == ["-w", str(REPO / "workspace.yaml")] and (REPO / "workspace.yaml").exists()
        assert f"DAGSTER_HOME={tmp_path / 'dh'}" in s["Environment"]
        assert f"STRIX_CONFIG={tmp_path / 'strix.toml'}" in s["Environment"]
        assert s["Restart"] == ["on-failure"] and s["WorkingDirectory"] == [str(REPO)]
        assert s["EnvironmentFile"] == ["-%h/.config/strix-pipeline/controller.env"]
        assert s["WantedBy"] == ["default.target"]
    web = shlex.split(_service(units[WEBSERVER])["ExecStart"][0])
    assert Path(web[0]).name == "dagster-webserver" and web[1:5] == ["-h", "127.0.0.1", "-p", "3000"]
    daemon = shlex.split(_service(units[DAEMON])["ExecStart"][0])
    assert Path(daemon[0]).name == "dagster-daemon" and daemon[1] == "run"


def test_strix_controller_install_writes_the_units_and_the_instance(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("STRIX_CONFIG", raising=False)
    units, home = tmp_path / "units", tmp_path / "dagster-home"
    argv = ["controller", "install", "--user", "--unit-dir", str(units), "--dagster-home", str(home)]
    assert main([*argv, "--no-reload", "--port", "3100"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {units / WEBSERVER}" in out and "systemctl --user enable --now" in out
    assert (home / "dagster.yaml").read_text() == (REPO / "strix_dagster" / "dagster.yaml").read_text()
    web = (units / WEBSERVER).read_text()
    assert "-p 3100" in web and f"DAGSTER_HOME={home}" in web and "STRIX_CONFIG" not in web
    assert main(["controller", "install", "--unit-dir", str(units), "--no-reload"]) == 1  # --user: said


def test_the_controller_set_up_builds_llama_server_only_for_a_local_host(tmp_path):
    """`make controller` asks this: the embedded default has host local (build it); a Box-only
    configuration has none (do not)."""
    assert main(["controller", "needs-local-engine"]) == 0
    box_only = tmp_path / "box.toml"
    text = (REPO / "config" / "strix-halo.example.toml").read_text()
    box_only.write_text(text)
    assert main(["--config", str(box_only), "controller", "needs-local-engine"]) == 1
