"""Where the tests and their data are, whatever folder a test file sits in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
SUPPORT = TESTS / "support"
