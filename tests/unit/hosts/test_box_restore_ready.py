"""What `strix doctor` says of the restore's readiness on the Box (hosts/box/restore_ready.py): linger
read from loginctl's own output, the sudo rule from `sudo -n -l`'s verdicts, each with the one command
that fixes it. The scripts run on a Box under systemd in tests/integration/docker/test_box_systemd.py."""

from __future__ import annotations

import subprocess

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box import restore_ready as rr


def unit_production(**kw) -> ProductionEngine:
    return ProductionEngine(
        stop_command=["sudo", "-n", "systemctl", "stop", "llama-server.service"],
        start_command=["sudo", "-n", "systemctl", "start", "llama-server.service"],
        unit="llama-server.service",
        health_url="http://127.0.0.1:8080/health",
        **kw,
    )


def test_linger_off_names_the_command_for_that_user():
    r = rr.linger_readiness("systemd=yes uid=1000 user=bench Linger=no\n")
    assert not r.ok and r.fix == "sudo loginctl enable-linger bench"
    assert "refused before production stops" in r.detail


def test_linger_on_root_or_no_systemd_need_nothing():
    assert rr.linger_readiness("systemd=yes uid=1000 user=bench Linger=yes").ok
    assert rr.linger_readiness("systemd=yes uid=0 user=root Linger=no").ok
    assert rr.linger_readiness("systemd=no uid=1000 user=bench ").ok


def test_linger_unreadable_is_not_taken_for_on():
    r = rr.linger_readiness("systemd=yes uid=1000 user=bench \n")
    assert not r.ok and r.fix == "sudo loginctl enable-linger bench"


def test_the_linger_script_runs_here():
    out = subprocess.run(["sh", "-c", rr.LINGER_SCRIPT], capture_output=True, text=True, check=True).stdout
    assert out.startswith("systemd=") and " user=" in out


def test_the_sudo_rule_is_checked_only_for_commands_run_through_sudo():
    assert rr.sudo_commands(unit_production()) == [
        ["systemctl", "stop", "llama-server.service"],
        ["systemctl", "start", "llama-server.service"],
    ]
    user_unit = ProductionEngine(
        stop_command=["systemctl", "--user", "stop", "p.service"],
        start_command=["systemctl", "--user", "start", "p.service"],
        unit="p.service",
        health_url="http://127.0.0.1:8080/health",
    )
    assert rr.sudo_commands(user_unit) == []


def test_a_missing_sudo_rule_gives_one_sudoers_line_for_both_commands():
    cmds = rr.sudo_commands(unit_production())
    out = "denied\npath=/usr/bin/systemctl\nallowed\npath=/usr/bin/systemctl\nuser=bench\n"
    r = rr.sudo_readiness(cmds, out)
    assert not r.ok and "systemctl stop llama-server.service" in r.detail
    assert r.fix == (
        "echo 'bench ALL=(root) NOPASSWD: /usr/bin/systemctl stop llama-server.service, "
        "/usr/bin/systemctl start llama-server.service' | sudo tee /etc/sudoers.d/strix"
    )
    ok = rr.sudo_readiness(cmds, out.replace("denied", "allowed"))
    assert ok.ok and ok.fix is None


def test_sudo_output_that_cannot_be_read_is_not_ok():
    assert not rr.sudo_readiness(rr.sudo_commands(unit_production()), "").ok
