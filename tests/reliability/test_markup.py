"""Strings from a registry are shown as text by `strix images list`: never read as
rich markup ("v9.9.9[/]" raised MarkupError, "[link=...]" made a spoofed hyperlink), and control
characters (an ANSI or OSC 8 escape in an image label) written visibly, not sent to the terminal.

The command runs in a pseudo-terminal, as a user would see it: on a pipe rich writes no escape
sequences at all, so only a terminal shows whether a hyperlink or a raw escape gets through.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.records import ImageRecord
from strix_pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ESC = "\x1b"
OSC8 = ESC + "]8;"  # the start of a terminal hyperlink

CLOSE = "v9.9.9[/]"
LINK = "[link=https://evil.example/login]v1.2.3[/link]"
# a label that is itself a hyperlink to elsewhere, then clears the screen
RAW = f"v2.0.0{OSC8};https://evil.example/{ESC}\\official{OSC8};{ESC}\\{ESC}[2J"


def _image(tag: str, version: str) -> ImageRecord:
    return ImageRecord(
        engine="vllm",
        registry="docker.io",
        repository="vllm/vllm-openai",
        tag=tag,
        digest="sha256:" + f"{abs(hash(tag)):x}".rjust(64, "0"),
        floating=False,
        created=T0,
        version=version,
        revision=None,
        labels=None,
        sort_key=tag,
        first_seen=T0,
        last_seen=T0,
    )


def _in_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``strix ARGV`` with its output on a 300-column pseudo-terminal; (exit code, what it wrote)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 300, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "CI")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from strix_pipeline.cli import main; sys.exit(main())", *argv],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env=env,
        close_fds=True,
    )
    os.close(child)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError as e:  # EIO: the child closed its end
                if e.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def _listed(tmp_path: Path, *images: ImageRecord) -> tuple[int, str]:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as wh:
        wh.upsert_images(list(images))
    return _in_a_terminal(["images", "list", "--warehouse", str(path)])


def test_a_closing_tag_in_a_version_is_shown_not_parsed(tmp_path: Path) -> None:
    code, out = _listed(tmp_path, _image("v9.9.9", CLOSE))
    assert code == 0, out
    assert "MarkupError" not in out and CLOSE in out


def test_no_hyperlink_or_raw_escape_from_a_registry_reaches_the_terminal(tmp_path: Path) -> None:
    code, out = _listed(tmp_path, _image("v1.2.3", LINK), _image("v2.0.0", RAW))
    assert code == 0, out
    assert OSC8 not in out, f"a hyperlink was emitted: {out!r}"
    assert f"{ESC}[2J" not in out, "the screen-clearing escape reached the terminal"
    assert LINK in out  # the markup, as the literal text the registry sent
    # the escapes are there, visibly: ESC written as \x1b
    assert r"v2.0.0\x1b]8;;https://evil.example/\x1b\official\x1b]8;;\x1b\\x1b[2J" in out
    # the table is still styled: only strangers' strings lose their escapes, not the terminal its colour
    assert ESC + "[" in out


def test_visible_escapes_every_control_and_format_character() -> None:
    from strix_pipeline.outside_text import visible

    assert visible("ok ✅ é") == "ok ✅ é"
    assert visible("a\rb\x07\x9b\u202e\u2028\x00") == r"a\rb\x07\x9b\u202e\u2028\x00"
