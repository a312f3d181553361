"""A model server's text is never rich markup in `strix bench`: a JSON-mode reply that is not JSON and
holds a chat-template token (``[/INST]``) is a note on the run, printed as text, and the run is saved
with ``--save``; before, the note reached the console as markup (MarkupError, rc 1) and the run was lost.
A ``--run-id`` with markup in it is printed as text after saving, never as a hyperlink or a traceback.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from support.bench_cli import bench
from support.synthetic_server import SyntheticServer

from strix_pipeline.cli import bench as cli_bench
from strix_pipeline.warehouse import Warehouse

HOSTILE = "[/INST] Sure! [bold]{not json"


class TemplateLeakServer(SyntheticServer):
    """Serves as SyntheticServer does, but answers every JSON-mode request with text that is not JSON."""

    async def _stream(self, req: dict[str, Any], chat: bool, w: asyncio.StreamWriter, recv: int) -> bool:
        if (req.get("response_format") or {}).get("type") not in ("json_object", "json_schema"):
            return await super()._stream(req, chat, w, recv)

        def chunk(payload: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(payload), payload)

        choice = {"index": 0, "delta": {"content": HOSTILE}} if chat else {"index": 0, "text": HOSTILE}
        event = {"id": "x", "object": "chat.completion.chunk", "model": "synthetic", "choices": [choice]}
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        w.write(chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
        w.write(chunk(b"data: [DONE]\n\n"))
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("COLUMNS", "400")  # one line per message


def _bench(argv: list[str]) -> int:
    async def go() -> int:
        async with TemplateLeakServer(ttft_ms=1, itl_ms=1) as srv:
            return await asyncio.to_thread(bench, ["--url", srv.base_url, *argv])

    return asyncio.run(go())


@pytest.mark.parametrize("run_id", ["reply-markup", "y[/]", "[link=https://evil.example/]x[/link]"])
def test_a_reply_or_run_id_with_markup_is_text_and_the_run_is_saved(
    tmp_path: Path, run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = tmp_path / "w.duckdb"
    argv = ["--scenario", "smoke", "--save", "--warehouse", str(wh), "--run-id", run_id]
    assert _bench(argv) == 3  # the smoke failed (its JSON check), as it should: not 1, a traceback
    out = capsys.readouterr().err
    assert "did not return valid JSON" in out and "[/INST]" in out  # the note, as text
    assert f"saved run {run_id}" in out
    with Warehouse.open(wh, read_only=True) as r:
        assert r.run_ids() == [run_id]


def test_a_progress_line_is_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A progress line quotes the run id, a scenario and a server's errors: printed as text, never as
    markup (a closing tag raised MarkupError mid-run, ``[link=...]`` made a hyperlink)."""
    line = "[link=https://evil.example/]run-x[/link] aborted: y[/] \x1b[2J"
    real = cli_bench.run_suite

    def run_suite(*args: Any, **kw: Any) -> Any:
        kw["on_progress"](line)
        return real(*args, **kw)

    monkeypatch.setattr(cli_bench, "run_suite", run_suite)
    wh = tmp_path / "w.duckdb"
    assert _bench(["--scenario", "smoke", "--save", "--warehouse", str(wh), "--run-id", "p"]) == 3
    out = capsys.readouterr().err
    assert "[link=https://evil.example/]run-x[/link] aborted: y[/] \\x1b[2J" in out
    assert "saved run p" in out
