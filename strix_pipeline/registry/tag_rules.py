"""Which tags of a repository are tracked: the OCI tag grammar, a source's include, exclude and
floating tags, and the literal prefixes that let a listing ask for those tags only."""

from __future__ import annotations

import re

from strix_pipeline.config import ImageSource

# The tag grammar of the OCI distribution spec ("Pulling manifests"): at most 128 characters.
OCI_TAG = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}")


def valid_tag(tag: object) -> bool:
    """The whole name is a tag by the OCI grammar (``fullmatch``: no trailing newline slips through)."""
    return isinstance(tag, str) and OCI_TAG.fullmatch(tag) is not None


def tag_selected(source: ImageSource, tag: str) -> bool:
    if not valid_tag(tag):
        return False
    if tag in source.floating:
        return True
    if not any(re.search(p, tag) for p in source.include):
        return False
    return not any(re.search(p, tag) for p in source.exclude)


_META = set(".^$*+?{}[]|()\\")


def literal_prefix(pattern: str) -> str | None:
    """The literal text every match of an anchored pattern starts with (``^server-rocm-b\\d+$`` ->
    ``server-rocm-b``), or None when the pattern is not anchored or may match anything first."""
    if not pattern.startswith("^") or "|" in pattern:
        return None
    out: list[str] = []
    i = 1
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            lit, step = pattern[i + 1], 2
        elif c in _META:
            break
        else:
            lit, step = c, 1
        nxt = pattern[i + step] if i + step < len(pattern) else ""
        if nxt in ("*", "?", "{"):
            break  # the character may be absent (or repeated a counted number of times)
        out.append(lit)
        i += step
    return "".join(out) or None


def tag_prefixes(source: ImageSource) -> list[str] | None:
    """Prefixes covering every tag the source can select, or None when a full listing is needed."""
    prefixes: list[str] = list(source.floating)
    for pattern in source.include:
        p = literal_prefix(pattern)
        if p is None:
            return None
        prefixes.append(p)
    out: list[str] = []
    for p in sorted(set(prefixes)):
        if not any(p.startswith(q) for q in out):  # "server-rocm" covers "server-rocm-b"
            out.append(p)
    return out
