"""Strings from outside (a server's reply, a file, a warehouse, the command line) made safe to show: on
a terminal (:func:`visible`) and in Markdown (:func:`markdown_text`, the Dagster UI's metadata). Imports
nothing of the project, so the commands and the analysis alike use the same two rules."""

from __future__ import annotations

import re
import unicodedata

# CommonMark lets a backslash escape any ASCII punctuation, which is then only itself. Escaped anywhere:
# links and images ([ ] ( ) !), HTML, entities and <autolinks> (< > &), code spans (`), emphasis
# (* _ ~), table cells (|), the backslash itself, and GFM's e-mail autolinks (@); at the start (where
# the text may begin a line) a heading, list, quote or rule; and the "://" or "www." a bare URL
# autolink needs. Everything else stays as it is, so a version or a date reads as itself in the source.
_ANYWHERE = {ord(c): "\\" + c for c in "\\`*_[]()<>!|&~@{}#"}
_LINE_START = re.compile(r"^([-+=>]|\d+(?=[.)]))")
_AUTOLINK = re.compile(r"(?i):(?=//)|(?<=www)\.")


def visible(value: object) -> str:
    """``value`` as text a terminal shows as it is: every control or format character (ESC starting an
    ANSI or OSC 8 hyperlink sequence, a carriage return that overwrites the line, a right-to-left
    override) written as its escape, ``\\x1b``, ``\\r``, ``\\u202e``."""
    text = str(value)
    return "".join(
        ch if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp") else ascii(ch)[1:-1] for ch in text
    )


def markdown_text(value: object) -> str:
    """``value`` as Markdown text that renders as exactly that text: never a link, an image, HTML, a
    code span or a table's column, and on one line (a newline or other control character is written as
    its escape, as :func:`visible` writes it). Not for inside a code span, where escapes are literal."""
    text = visible(value).translate(_ANYWHERE)
    text = _AUTOLINK.sub(lambda m: "\\" + m.group(), text)
    # "1." or "1)" begins a list: its digits stay, the mark after them is escaped
    return _LINE_START.sub(
        lambda m: m.group() + "\\" if m.group().isdigit() else "\\" + m.group(), text, count=1
    )
