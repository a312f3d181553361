"""The tests' own rooms: test files import helpers from tests/support/ and fixtures come from conftest.py,
never from another test file; unit tests and the integration tests of each service kind live apart,
and every integration test carries the marker of the service it needs."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from support.paths import REPO, TESTS

KINDS = ("docker", "llama", "vllm", "registry", "postgres")
# the markers of a test that needs a real service; sshd and chromium tests have no folder of their own
SERVICE_MARKS = (*KINDS, "sshd", "chromium")
ROOMS = ("unit", "integration", "reliability")


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import names, at any depth (an import inside a function counts too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return out


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "tests":  # tests.<x> is a test module unless it is tests.support[...]
        return len(parts) > 1 and parts[1] != "support"
    return parts[0] == "reliability" or any(p.startswith("test_") for p in parts)


def _marks(node: ast.AST) -> set[str]:
    """The names of the ``pytest.mark.<name>`` attributes inside ``node``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
        and isinstance(n.value.value, ast.Name)
        and n.value.value.id == "pytest"
    }


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return _marks(node.value)
    return set()


def test_no_test_file_imports_another_test_module() -> None:
    bad = []
    for path in [
        *_test_files(),
        *sorted((TESTS / "support").rglob("*.py")),
        *sorted(TESTS.rglob("conftest.py")),
    ]:
        for line, name in _imported(ast.parse(path.read_text(), str(path))):
            if _is_test_module(name):
                bad.append(f"{path.relative_to(TESTS)}:{line} imports {name}")
    assert not bad, "helpers belong in tests/support/, fixtures in a conftest.py:\n" + "\n".join(bad)


def test_test_files_sit_in_their_rooms_with_unique_names() -> None:
    files = _test_files()
    misplaced = [str(p.relative_to(TESTS)) for p in files if p.relative_to(TESTS).parts[0] not in ROOMS]
    assert not misplaced, f"test files outside {ROOMS}: {misplaced}"
    integration = [
        p.relative_to(TESTS / "integration") for p in files if p.is_relative_to(TESTS / "integration")
    ]
    assert all(len(p.parts) == 2 and p.parts[0] in KINDS for p in integration), integration
    # pytest's default import mode imports a test file by its basename (no __init__.py in the rooms)
    names = [p.name for p in files]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_integration_test_carries_the_marker_of_its_kind() -> None:
    missing = []
    for kind in KINDS:
        for path in sorted((TESTS / "integration" / kind).glob("test_*.py")):
            tree = ast.parse(path.read_text(), str(path))
            if kind in _module_marks(tree):
                continue
            tests = [
                n
                for n in tree.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
            ]
            missing += [
                f"{path.relative_to(TESTS)}::{t.name}"
                for t in tests
                if kind not in set().union(*(_marks(d) for d in t.decorator_list))
            ]
            assert tests, f"{path.relative_to(TESTS)}: no tests"
    assert not missing, "an integration test without the marker of its folder:\n" + "\n".join(missing)


def test_no_unit_test_needs_a_service() -> None:
    bad = []
    for path in sorted((TESTS / "unit").rglob("test_*.py")):
        # every pytest.mark.<name> in the file: the module's pytestmark, a class's, a test's decorators
        marks = _marks(ast.parse(path.read_text(), str(path))) & set(SERVICE_MARKS)
        if marks:
            bad.append(f"{path.relative_to(TESTS)}: {sorted(marks)}")
    assert not bad, "a test that needs a service belongs in tests/integration/<kind>/:\n" + "\n".join(bad)


def test_every_marker_used_is_registered() -> None:
    registered = {
        m.split(":")[0].strip()
        for m in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
            "markers"
        ]
    }
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "timeout"}
    used = {}
    for path in _test_files():
        for mark in _marks(ast.parse(path.read_text(), str(path))):
            used.setdefault(mark, str(path.relative_to(TESTS)))
    unknown = {m: where for m, where in used.items() if m not in registered | builtin}
    assert not unknown, f"markers not in pyproject.toml's [tool.pytest.ini_options] markers: {unknown}"
