"""The site's file names: each run's page named from its id, as one plain name the id cannot steer."""

from __future__ import annotations

import hashlib
import re

INDEX = "index.html"
FEED = "feed.xml"
GLOSSARY = "glossary.html"
STATE = "report.json"  # what this report saw, for the next one's "since the last report"
RUNS_DIR = "runs"


def run_page(run_id: str) -> str:
    """``runs/<readable part>-<hash>.html``: the id's safe characters for a person, its hash for
    uniqueness (a run id is any string a warehouse holds: "../x" or "<script>" stays a plain name)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._")[:48] or "run"
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"{RUNS_DIR}/{readable}-{digest}.html"


def stable_key(*parts: object) -> str:
    """A short hex key of the parts (a feed entry's id, an anchor): the same parts, the same key."""
    return hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode()).hexdigest()[:20]
