"""Secrets (registry tokens, the webhook URL, SSH details) never land in anything the pipeline writes.

Distinctive values are planted in the environment, the whole local pipeline runs (`strix run`:
benchmark, warehouse, charts, decision, a webhook attempt to a closed loopback port), and every file
it wrote -- warehouse, artifacts, logs, the Dagster instance -- and everything it printed is searched.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import need
from support.pipeline_helpers import llama_available, write_config

from strix_pipeline import cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SECRETS = {
    "STRIX_WEBHOOK_URL": f"http://127.0.0.1:{_closed_port()}/hooks/SECRET-WEBHOOK-7f3a9c",
    "STRIX_DOCKERHUB_USERNAME": "secret-user-4b2c8e",
    "STRIX_DOCKERHUB_TOKEN": "SECRET-TOKEN-91d0aa",
    "STRIX_GHCR_USERNAME": "secret-ghcr-user-33f1",
    "STRIX_GHCR_TOKEN": "SECRET-GHCR-5e7a02",
    "STRIX_SSH_USER": "secret-ssh-user-c0ffee",
}
# what is distinctive in each (a URL's host and port are not secret; its path is)
NEEDLES = ["SECRET-WEBHOOK-7f3a9c", *list(SECRETS.values())[1:]]


@pytest.mark.llama
@pytest.mark.slow
def test_planted_secrets_appear_in_no_file_and_no_output(tmp_path: Path, monkeypatch, capfd, caplog) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    rc = cli.main(["--config", str(write_config(tmp_path)), "run"])
    printed = capfd.readouterr()
    assert rc == 0, printed.out[-2000:]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".duckdb" for p in files) and any(p.suffix == ".png" for p in files)
    assert any("dagster-home" in p.parts for p in files)  # the instance's storage is searched too
    found = []
    for p in files:
        data = p.read_bytes()
        found += [f"{p.relative_to(tmp_path)}: {n}" for n in NEEDLES if n.encode() in data]
    found += [f"output: {n}" for n in NEEDLES if n in printed.out or n in printed.err]
    assert found == []

    # and a webhook that fails (the closed port) logs why without the URL, whose path is the secret
    from strix_pipeline import webhook

    with caplog.at_level("DEBUG"):
        assert webhook.post(SECRETS["STRIX_WEBHOOK_URL"], "a regression", timeout_s=2) is False
    assert "webhook POST failed" in caplog.text and "SECRET-WEBHOOK" not in caplog.text
