"""Every import path refuses bad input with the file, field and value named, and a refused import
changes nothing in the warehouse.

Real parts: the `strix` CLI entry point, a real DuckDB warehouse file seeded with a run, the peer
fixtures the real tools wrote (tests/fixtures/peers/), a `strix export --parquet` directory of a real
warehouse, and the real registry client against a loopback HTTP registry that lists hostile tag names.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.warehouse import make_run

from strix_pipeline.config import ImageSource, StrixConfig
from strix_pipeline.peers import common as peers_common
from strix_pipeline.records import CriterionResult
from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.registry.discovery import refresh_images
from strix_pipeline.registry.tag_rules import tag_selected
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.warehouse import Warehouse

PEERS = Path(__file__).parent.parent / "fixtures" / "peers"
T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
MAX_FILE_BYTES = 64 * 2**20  # the limit docs/security.md states for a peer result file


def strix(*argv: str) -> int:
    from strix_pipeline.cli import main

    return main(list(argv))


def snapshot(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table the imports touch: "changes nothing" is checked on the data itself."""
    with Warehouse.open(path, read_only=True) as wh:
        return {
            t: wh.query_df(f'SELECT * FROM "{t}" ORDER BY ALL').rows()
            for t in ("runs", "aggregates", "requests", "decisions", "images", "hosts")
        }


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as wh:
        wh.load_run(make_run("kept"))
    return path


def _copy(src: str, dst: Path, mutate: Callable[[Any], None]) -> Path:
    doc = json.loads((PEERS / src).read_text())
    mutate(doc)
    dst.write_text(json.dumps(doc))
    return dst


def _set(*path: Any, value: Any) -> Callable[[Any], None]:
    def mutate(doc: Any) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


VLLM = ("vllm-bench/vllm-bench-serve.json", ["--tool-version", "0.32.0"])
GUIDELLM = ("guidellm/benchmarks.json", [])
AIPERF = ("aiperf/profile_export_aiperf.json", [])
LLAMA = ("llama-bench/llama-bench.json", ["--tool-version", "11434.0.0"])

# (fixture, mutation, what the refusal names: field, value)
NEGATIVE = [
    (VLLM, _set("median_ttft_ms", value=-5.0), "ttft_p50_ms", "-5.0"),
    (VLLM, _set("duration", value=-12.5), "duration_s", "-12.5"),
    (VLLM, _set("output_throughput", value=-3.0), "output_tokens_per_s", "-3.0"),
    (VLLM, _set("max_concurrency", value=0), "level", "0"),
    (AIPERF, _set("time_to_first_token", "p50", value=-1.0), "ttft_p50_ms", "-1.0"),
    (AIPERF, _set("input_config", "phases", 0, "concurrency", value=0), "level", "0"),
    (GUIDELLM, _set("benchmarks", 0, "duration", value=-4.0), "duration_s", "-4.0"),
    (LLAMA, _set(1, "avg_ts", value=-23.75), "output_tokens_per_s", "-23.75"),
]


@pytest.mark.parametrize(
    ("fixture", "mutate", "field", "value"), NEGATIVE, ids=[f"{n[0][0]}:{n[2]}={n[3]}" for n in NEGATIVE]
)
def test_negative_values_and_concurrency_0_are_refused_naming_file_field_and_value(
    fixture: tuple[str, list[str]],
    mutate: Callable[[Any], None],
    field: str,
    value: str,
    warehouse: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, extra = fixture
    before = snapshot(warehouse)
    bad = _copy(src, tmp_path / Path(src).name, mutate)
    assert strix("import", str(bad), "--warehouse", str(warehouse), *extra) == 1
    err = capsys.readouterr().err
    assert f"{bad}: " in err and f": {field}: {value} is refused" in err and "nothing was loaded" in err, err
    assert snapshot(warehouse) == before


def test_the_aiperf_fixture_really_has_a_concurrency_phase_at_index_0() -> None:
    # the mutation above must hit the phase the reader levels, or it would test nothing
    phases = json.loads((PEERS / AIPERF[0]).read_text())["input_config"]["phases"]
    assert phases[0]["kind"] == "profiling" and phases[0]["type"] == "concurrency"


HUGE = [
    (VLLM, _set("duration", value=1e308), "$.duration"),
    (VLLM, _set("request_rate", value=1e308), "$.request_rate"),
    (VLLM, _set("completed", value=10**30), "$.completed"),
    (GUIDELLM, _set("benchmarks", 0, "start_time", value=1e308), "$.benchmarks[0].start_time"),
    (GUIDELLM, _set("benchmarks", 0, "start_time", value=9e15), "$.benchmarks[*].start_time"),
    (LLAMA, _set(0, "test_time", value=1e300), "$[0].test_time"),
]


@pytest.mark.parametrize(("fixture", "mutate", "field"), HUGE, ids=[h[2] for h in HUGE])
def test_huge_numbers_are_refused_naming_the_field_not_a_traceback(
    fixture: tuple[str, list[str]],
    mutate: Callable[[Any], None],
    field: str,
    warehouse: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, extra = fixture
    before = snapshot(warehouse)
    bad = _copy(src, tmp_path / Path(src).name, mutate)
    assert strix("import", str(bad), "--warehouse", str(warehouse), *extra) == 1  # not an exception
    err = capsys.readouterr().err
    assert f"{bad}: {field}: " in err and "nothing was loaded" in err, err
    assert snapshot(warehouse) == before


@pytest.mark.parametrize("fmt", [None, "vllm", "llama-bench"])
def test_deep_nesting_is_refused_naming_the_file(
    fmt: str | None, warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(warehouse)
    bad = tmp_path / "deep.json"
    bad.write_text('{"completed": ' + "[" * 100_000 + "]" * 100_000 + "}")
    argv = ["import", str(bad), "--warehouse", str(warehouse), "--tool-version", "1"]
    assert strix(*argv, *(["--format", fmt] if fmt else [])) == 1
    err = capsys.readouterr().err
    assert f"{bad}: $: " in err and "nested too deeply" in err, err
    assert snapshot(warehouse) == before


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(
    warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(warehouse)
    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # sparse: the size without the disk
        fh.write(b'{"completed": 1}')
        fh.truncate(MAX_FILE_BYTES + 1)
    reads: list[int] = []
    real_read_bytes = Path.read_bytes
    real_read_text = Path.read_text

    def counting_bytes(self: Path) -> bytes:
        reads.append(1)
        return real_read_bytes(self)

    def counting_text(self: Path, *a: Any, **kw: Any) -> str:
        reads.append(1)
        return real_read_text(self, *a, **kw)

    monkeypatch.setattr(Path, "read_bytes", counting_bytes)
    monkeypatch.setattr(Path, "read_text", counting_text)
    assert strix("import", str(big), "--warehouse", str(warehouse)) == 1
    err = capsys.readouterr().err
    assert f"{big}: $: larger than the {MAX_FILE_BYTES // 2**20} MiB" in err and "not read" in err, err
    assert not reads  # refused from its size, not after reading it whole
    assert snapshot(warehouse) == before
    assert getattr(peers_common, "MAX_FILE_BYTES", None) == MAX_FILE_BYTES


def test_a_file_at_the_size_limit_is_still_read(tmp_path: Path, warehouse: Path) -> None:
    fixture = (PEERS / VLLM[0]).read_bytes()
    padded = tmp_path / "padded.json"
    padded.write_bytes(fixture + b" " * (MAX_FILE_BYTES - len(fixture)))
    assert strix("import", str(padded), "--warehouse", str(warehouse), *VLLM[1]) == 0


# ---- strix import --parquet -------------------------------------------------------------------------


def decision(evaluation_id: str) -> list[CriterionResult]:
    return [
        CriterionResult(
            evaluation_id=evaluation_id,
            evaluated_at=T0,
            host="strix-halo",
            verdict="stay",
            criterion="C1",
            name="official_image_starts",
            required=True,
            status="pass",
            value=1.0,
            threshold=1.0,
            ci_low=None,
            ci_high=None,
            unit=None,
            evidence_run_ids=["kept"],
            image_digests=[],
            quantization_mismatch=False,
            reason="it started",
            first_held_at=None,
        )
    ]


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """`strix export --parquet` of a warehouse holding run "kept" (as the target has) and run "new",
    and decisions "eval-kept" (the target has it too) and "eval-new"."""
    src = tmp_path / "source.duckdb"
    with Warehouse.open(src) as wh:
        wh.load_run(make_run("kept", requests_per_level=9))
        wh.load_run(make_run("new", engine="vllm"))
        wh.save_decision(decision("eval-kept"))
        wh.save_decision(decision("eval-new"))
    out = tmp_path / "export"
    assert strix("export", "--parquet", str(out), "--warehouse", str(src)) == 0
    return out


@pytest.fixture
def target(warehouse: Path) -> Path:
    with Warehouse.open(warehouse) as wh:
        wh.save_decision(decision("eval-kept"))
    return warehouse


def test_parquet_import_refuses_to_replace_existing_runs_naming_them(
    export: Path, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(target)
    assert strix("import", "--parquet", str(export), "--warehouse", str(target)) == 1
    err = capsys.readouterr().err
    assert "1 run(s) already in the warehouse: kept" in err and "--replace" in err, err
    assert snapshot(target) == before  # "new" is not imported either: all or nothing


def test_parquet_import_refuses_to_replace_existing_decisions_naming_them(
    export: Path, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # only the decision is already there: the runs' refusal must not be what stops it
    pl.read_parquet(export / "runs.parquet").filter(pl.col("run_id") == "new").write_parquet(
        export / "runs.parquet"
    )
    for t in ("requests", "aggregates", "memory_samples", "server_metrics"):
        pl.read_parquet(export / f"{t}.parquet").filter(pl.col("run_id") == "new").write_parquet(
            export / f"{t}.parquet"
        )
    before = snapshot(target)
    assert strix("import", "--parquet", str(export), "--warehouse", str(target)) == 1
    err = capsys.readouterr().err
    assert "decisions.parquet: 1 decision(s) already in the warehouse: eval-kept" in err, err
    assert snapshot(target) == before


def test_parquet_import_replaces_only_with_replace(export: Path, target: Path) -> None:
    assert strix("import", "--parquet", str(export), "--warehouse", str(target), "--replace") == 0
    with Warehouse.open(target, read_only=True) as wh:
        assert sorted(wh.run_ids()) == ["kept", "new"]
        assert wh.count("requests", "kept") == 18  # the imported load of "kept" (9 a level) replaced it
        ids = wh.query_df("SELECT evaluation_id, count(*) n FROM decisions GROUP BY ALL ORDER BY 1").rows()
    assert ids == [("eval-kept", 1), ("eval-new", 1)]


# (table, column, value, run) written into an export; each must be refused naming all four
PARQUET_BAD = [
    ("aggregates", "ttft_p95_ms", -1.0),
    ("aggregates", "duration_s", float("inf")),
    ("aggregates", "output_tokens_per_s", -0.5),
    ("aggregates", "level", 0),  # the make_run levels are concurrency levels
    ("requests", "e2e_ms", -2000.0),
    ("runs", "peak_bytes", -1),
]


@pytest.mark.parametrize(
    ("table", "column", "value"), PARQUET_BAD, ids=[f"{t}.{c}" for t, c, _ in PARQUET_BAD]
)
def test_parquet_import_refuses_values_the_peer_import_refuses(
    table: str,
    column: str,
    value: float,
    export: Path,
    target: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    df = pl.read_parquet(export / f"{table}.parquet")
    dtype = df.schema[column]
    df.with_columns(
        pl.when(pl.col("run_id") == "new")
        .then(pl.lit(value, dtype=dtype))
        .otherwise(pl.col(column))
        .alias(column)
    ).write_parquet(export / f"{table}.parquet")
    before = snapshot(target)
    # --replace: the refusal is the value's, not the existing run's
    assert strix("import", "--parquet", str(export), "--warehouse", str(target), "--replace") == 1
    err = capsys.readouterr().err
    shown = repr(value)
    assert f"{export / table}.parquet: run 'new': {column} = {shown} is refused" in err, err
    assert snapshot(target) == before


def test_parquet_import_refuses_a_run_id_twice(
    export: Path, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = pl.read_parquet(export / "runs.parquet")
    pl.concat([runs, runs.filter(pl.col("run_id") == "new")]).write_parquet(export / "runs.parquet")
    before = snapshot(target)
    assert strix("import", "--parquet", str(export), "--warehouse", str(target), "--replace") == 1
    assert "run_id 'new' appears more than once" in capsys.readouterr().err
    assert snapshot(target) == before


# ---- tags from a registry -------------------------------------------------------------------------

REPO = "example/engine"
GOOD = "v1.2.3"
HOSTILE = ["v1.2.3\n", "v1.2.4\n", "../../v1.2.5", "v1.2.6 ", "-v1.2.7", "v" + "1" * 128 + ".0.0"]


def _blob(obj: Any) -> tuple[bytes, str]:
    data = json.dumps(obj).encode()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


class _Registry(BaseHTTPRequestHandler):
    """A registry whose tag list holds names no OCI registry may serve, and that answers for them too
    (as a hostile one would): every name is a manifest whose config labels a version."""

    config, config_digest = _blob({"created": "2026-11-01T00:00:00Z", "config": {"Labels": {}}})
    manifest, manifest_digest = _blob(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest},
            "layers": [],
        }
    )

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: bytes, content_type: str, digest: str | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith(f"/v2/{REPO}/tags/list"):
            self._answer(json.dumps({"name": REPO, "tags": [GOOD, *HOSTILE]}).encode(), "application/json")
        elif self.path.startswith(f"/v2/{REPO}/manifests/"):
            self._answer(self.manifest, "application/vnd.oci.image.manifest.v1+json", self.manifest_digest)
        elif self.path == f"/v2/{REPO}/blobs/{self.config_digest}":
            self._answer(self.config, "application/octet-stream")
        elif self.path.rstrip("/") == "/v2":
            self._answer(b"{}", "application/json")
        else:
            self.send_error(404)

    do_HEAD = do_GET


@pytest.fixture
def hostile_registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_registry_tags_outside_the_oci_grammar_are_skipped_with_a_reason_and_never_stored(
    hostile_registry: str, warehouse: Path
) -> None:
    source = {
        "registry": hostile_registry,
        "repository": REPO,
        # unanchored at the start, so the whole list is read (an anchored one lists only its prefix)
        "include": [r"v\d+\.\d+\.\d+$"],
        "insecure": True,
    }
    cfg = StrixConfig.model_validate(
        {
            "hosts": {"strix-halo": {"kind": "local"}},
            "engines": {"llamacpp": {"kind": "llamacpp", "images": [source]}, "vllm": {"kind": "vllm"}},
            "models": {"m": {"model": "M", "family": "m", "quantization": "Q4_K_M", "source": "pypi:x"}},
            "profiles": {"quick": {}},
        }
    )
    policy = RetryPolicy(
        attempts=1, backoff_s=0.01, backoff_max_s=0.01, connect_timeout_s=1.0, read_timeout_s=2.0
    )

    def client(s: ImageSource) -> RegistryClient:
        return RegistryClient(s.registry, insecure=True, policy=policy)

    with Warehouse.open(warehouse) as wh:
        report = refresh_images(cfg, wh, client_factory=client, now=T0 + timedelta(days=1))
        stored = [r[0] for r in wh.query_df("SELECT tag FROM images ORDER BY tag").rows()]
    assert not report.errors, report.errors
    assert stored == [GOOD] and [r.tag for r in report.new] == [GOOD]
    skipped = {s.tag: s.reason for s in report.skipped}
    assert sorted(skipped) == sorted(HOSTILE)
    for tag, reason in skipped.items():
        assert repr(tag) in reason and "[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}" in reason, reason


def test_include_patterns_do_not_let_a_trailing_newline_through() -> None:
    src = ImageSource(registry="r", repository=REPO, include=[r"^v\d+\.\d+\.\d+$"], floating=["latest"])
    assert tag_selected(src, "v1.2.3")
    assert not tag_selected(src, "v1.2.3\n")
    assert not tag_selected(src, "latest\n")
    assert not tag_selected(src, "v" + "1" * 200 + ".0.0")  # longer than the 128 characters a tag may be


def test_a_peer_file_given_the_run_id_of_a_strix_run_does_not_replace_it_without_replace(
    warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(warehouse)
    argv = ["import", str(PEERS / VLLM[0]), "--warehouse", str(warehouse), *VLLM[1], "--run-id", "kept"]
    assert strix(*argv) == 1
    err = capsys.readouterr().err
    assert "run kept is already in the warehouse; give --replace" in err, err
    assert snapshot(warehouse) == before
    assert strix(*argv, "--replace") == 0
    with Warehouse.open(warehouse, read_only=True) as wh:
        assert (
            wh.query_df("SELECT harness_version FROM runs WHERE run_id = 'kept'").item()
            == "vllm-bench 0.32.0"
        )


def test_a_peer_file_imported_again_under_its_default_id_replaces_its_earlier_import(warehouse: Path) -> None:
    argv = ["import", str(PEERS / VLLM[0]), "--warehouse", str(warehouse), *VLLM[1]]
    assert strix(*argv) == 0 and strix(*argv) == 0
    with Warehouse.open(warehouse, read_only=True) as wh:
        assert wh.query_df("SELECT count(*) FROM runs WHERE suite = 'vllm-bench'").item() == 1
