"""A registry that stalls, rate-limits, answers 5xx, malformed JSON or a body cut short, or fails part
way through a paged tag list: discovery leaves the images known before exactly as they were (every
column, last_seen included), adds none of the repository's new images, and records the error with its
class in ``registry_errors``. The same refresh without the fault adds the new images, so the faults
are what kept them out.

Real parts: a docker-registry on loopback holding images pushed with docker, a fault-injecting front
that pages the tag list one tag a page (tests/support/registry_fronts.py), the real DuckDB warehouse.

Retry policy under test (strix_pipeline/registry/client.py, discovery's default client): 3 attempts a
request; 5xx, timeouts and cut-short bodies retried after 0.5 s doubling (jittered, at most 4 s);
429 waits Retry-After when it is at most 120 s and fits the repository's 120 s budget, else fails at
once; malformed JSON is not retried. Timeouts: 3 s connect, 20 s read, never past the budget.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from support.infra import Registry, build_image, push, remove_image, start_registry
from support.registry_fronts import Fault, Front

from strix_pipeline.config import ImageSource, StrixConfig
from strix_pipeline.registry.client import OCI_MANIFEST, RegistryClient
from strix_pipeline.registry.discovery import DiscoveryReport, default_client, refresh_images
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.registry, pytest.mark.docker]

REPO = "ggml-org/llama.cpp"
T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
T1 = T0 + timedelta(days=1)
KNOWN = ["server-rocm-b100", "server-rocm-b101"]
NEW = ["server-rocm-b102", "server-rocm-b103"]
# fast retries, real waits: what is being tested is that the policy gives up, not how long it sleeps
FAST = RetryPolicy(attempts=3, backoff_s=0.05, backoff_max_s=0.2, connect_timeout_s=1.0, read_timeout_s=1.0)


@dataclass
class Env:
    reg: Registry
    front: Front
    template: Path  # a warehouse that knows KNOWN, as a refresh before NEW were pushed left it


def config_for(host: str, include: str = r"^server-rocm-b\d+$") -> StrixConfig:
    source = {"registry": host, "repository": REPO, "include": [include], "insecure": True}
    return StrixConfig.model_validate(
        {
            "hosts": {"strix-halo": {"kind": "local"}},
            "engines": {"llamacpp": {"kind": "llamacpp", "images": [source]}, "vllm": {"kind": "vllm"}},
            "models": {"m": {"model": "M", "family": "m", "quantization": "Q4_K_M", "source": "pypi:x"}},
            "profiles": {"quick": {}},
        }
    )


@pytest.fixture(scope="module")
def env(registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("registry-faults")
    reg = start_registry(tmp)
    front = Front(reg.url, page_size=1).start()  # one tag a page: a listing is several requests
    pushed: list[str] = []

    def image(tag: str) -> None:
        ref = f"{reg.host}/{REPO}:{tag}"
        build_image(ref, {"/etc/build": tag.encode()}, labels={"org.opencontainers.image.version": tag})
        pushed.append(ref)
        push(ref)

    try:
        for tag in KNOWN:
            image(tag)
        template = tmp / "known.duckdb"
        with Warehouse.open(template) as wh:
            r = refresh_images(config_for(front.host), wh, client_factory=client_factory(FAST), now=T0)
            assert sorted(i.tag for i in r.new) == KNOWN and not r.errors
        for tag in NEW:
            image(tag)
        yield Env(reg, front, template)
    finally:
        front.stop()
        for ref in pushed:
            remove_image(ref)
        reg.stop()


def client_factory(policy: RetryPolicy, made: list[RegistryClient] | None = None):
    def make(source: ImageSource) -> RegistryClient:
        c = RegistryClient(source.registry, insecure=True, policy=policy)
        if made is not None:
            made.append(c)
        return c

    return make


def images(wh: Warehouse) -> pl.DataFrame:
    return wh.query_df("SELECT * FROM images ORDER BY registry, repository, tag")


@pytest.fixture
def wh(env: Env, tmp_path: Path) -> Iterator[Warehouse]:
    env.front.faults.clear()
    path = tmp_path / "wh.duckdb"
    shutil.copy(env.template, path)
    with Warehouse.open(path) as w:
        assert sorted(i.tag for i in w.known_images()) == KNOWN
        yield w
    env.front.faults.clear()


def refresh(env: Env, wh: Warehouse, policy: RetryPolicy = FAST, **kw) -> DiscoveryReport:
    factory = kw.pop("client_factory", None) or client_factory(policy)
    return refresh_images(config_for(env.front.host), wh, client_factory=factory, now=T1, **kw)


def assert_refused(env: Env, wh: Warehouse, before: pl.DataFrame, report: DiscoveryReport, cls: str) -> str:
    """Nothing changed, one error of class ``cls`` recorded; then the same refresh, unfaulted, adds NEW."""
    assert images(wh).equals(before)  # every column of every known image, last_seen included
    assert not report.new and not report.moved and not report.gone
    (err,) = report.errors
    assert err.error_class == cls and err.repository == REPO, err
    rows = wh.query_df("SELECT registry, repository, error, occurred_at FROM registry_errors").rows()
    assert len(rows) == 1 and rows[0][:2] == (env.front.host, REPO) and rows[0][3] == T1
    assert rows[0][2].startswith(f"{cls}: {env.front.host}/{REPO}: "), rows[0][2]
    env.front.faults.clear()
    again = refresh(env, wh)
    assert not again.errors and sorted(i.tag for i in again.new) == NEW
    return rows[0][2]


# ---- stalls -----------------------------------------------------------------------------------------


def test_a_registry_that_accepts_and_never_answers_times_out(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    env.front.add_fault(r"/tags/list$", Fault(stall_s=60), times=3)
    t = time.monotonic()
    report = refresh(env, wh)
    took = time.monotonic() - t
    # 3 attempts x 1 s read timeout (+ 1.5 s backoff): retried, and bounded far below the 60 s stall
    assert 2.5 <= took < 15, took
    error = assert_refused(env, wh, before, report, "RegistryUnavailable")
    assert "ReadTimeout" in error and "after 3 attempts" in error


def test_a_stall_cannot_outlast_the_repository_budget(env: Env, wh: Warehouse) -> None:
    """The default client's 20 s read timeout is cut to what is left of the repository's budget."""
    before = images(wh)
    env.front.add_fault(r"/tags/list$", Fault(stall_s=60), times=3)
    t = time.monotonic()

    def default(source: ImageSource) -> RegistryClient:
        c = default_client(source)
        assert c.policy.read_timeout_s == 20 and c.policy.attempts == 3  # what this test bounds
        return c

    report = refresh(env, wh, client_factory=default, repository_budget_s=2.0)
    took = time.monotonic() - t
    assert took < 8, took  # the 2 s budget and a busy machine's slack; uncut it would be 3 x 20 s
    error = assert_refused(env, wh, before, report, "RegistryUnavailable")
    assert "time budget" in error or "ReadTimeout" in error


# ---- rate limits and server errors ----------------------------------------------------------------


def test_429_with_retry_after_is_waited_out_then_given_up(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    made: list[RegistryClient] = []
    env.front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "1"}), times=3)
    t = time.monotonic()
    report = refresh(env, wh, client_factory=client_factory(FAST, made))
    took = time.monotonic() - t
    assert made[0].waits == [1.0, 1.0] and 2 <= took < 12  # waited as told, twice, then the 3rd 429
    error = assert_refused(env, wh, before, report, "RateLimited")
    assert "429" in error


def test_429_asking_for_longer_than_the_wait_bound_fails_at_once(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    made: list[RegistryClient] = []
    env.front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "3600"}))
    t = time.monotonic()
    report = refresh(env, wh, client_factory=client_factory(FAST, made))
    assert made[0].waits == [] and time.monotonic() - t < 3  # 3600 s > max_wait_s (120 s)
    assert "retry after 3600s" in assert_refused(env, wh, before, report, "RateLimited")


def test_a_single_429_is_waited_out_and_the_refresh_completes(env: Env, wh: Warehouse) -> None:
    made: list[RegistryClient] = []
    env.front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "1"}))
    report = refresh(env, wh, client_factory=client_factory(FAST, made))
    assert made[0].waits == [1.0] and not report.errors and sorted(i.tag for i in report.new) == NEW


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_is_retried_then_recorded(env: Env, wh: Warehouse, status: int) -> None:
    before = images(wh)
    env.front.add_fault(r"/tags/list$", Fault(status), times=3)
    report = refresh(env, wh)
    assert f"{status} after 3 attempts" in assert_refused(env, wh, before, report, "RegistryUnavailable")
    assert len(env.front.faults) == 0  # all three attempts were spent on it


# ---- malformed and cut-short bodies -------------------------------------------------------------


def test_malformed_json_in_the_tag_list(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    env.front.add_fault(
        r"/tags/list$",
        Fault(200, {"Content-Type": "application/json"}, b'{"name": "x", "tags": ["server-rocm-b1'),
    )
    report = refresh(env, wh)
    assert "not JSON" in assert_refused(env, wh, before, report, "MalformedResponse")


def test_malformed_json_in_a_manifest(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    # the GET of a new image's manifest by digest (the HEADs by tag went through)
    env.front.add_fault(
        r"/manifests/sha256:",
        Fault(200, {"Content-Type": OCI_MANIFEST}, b'{"schemaVersion": 2, "config": {"digest": '),
        method="GET",
    )
    report = refresh(env, wh)
    error = assert_refused(env, wh, before, report, "MalformedResponse")
    assert "manifest body does not match" in error


def test_a_manifest_body_cut_short_every_time(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    env.front.add_fault(r"/manifests/sha256:", Fault(upstream=True, cut_at=40), times=3, method="GET")
    report = refresh(env, wh)
    error = assert_refused(env, wh, before, report, "RegistryUnavailable")
    assert "RemoteProtocolError" in error and "after 3 attempts" in error


def test_a_tag_list_cut_short_once_is_retried(env: Env, wh: Warehouse) -> None:
    body = b'{"name": "ggml-org/llama.cpp", "tags": ["server-rocm-b100"]}'
    env.front.add_fault(r"/tags/list$", Fault(200, {"Content-Type": "application/json"}, body, cut_at=12))
    report = refresh(env, wh)
    assert not report.errors and sorted(i.tag for i in report.new) == NEW


# ---- a listing that fails part way ---------------------------------------------------------------


def test_a_tag_list_failing_on_a_later_page_adds_none_of_the_new_images(env: Env, wh: Warehouse) -> None:
    before = images(wh)
    # one tag a page: pages 1-2 (the known tags) go through, page 3 (the first new tag) fails
    env.front.add_fault(r"/tags/list$", Fault(503), times=3, after=2)
    seen = len(env.front.requests_to(r"/tags/list$"))
    report = refresh(env, wh)
    # two good pages, then three attempts at the third, and no further page
    assert len(env.front.requests_to(r"/tags/list$")) - seen == 5
    assert "503 after 3 attempts" in assert_refused(env, wh, before, report, "RegistryUnavailable")


# ---- the Dagster asset ----------------------------------------------------------------------------


def test_engine_images_asset_keeps_known_images_and_reports_the_error_class(env: Env, tmp_path: Path) -> None:
    """engine_images with the pipeline's own registry client (RegistryResource, 3 attempts): the
    materialisation succeeds, says which registry failed and how, adds no partition for the new tags,
    and leaves the known rows as they were."""
    import dagster as dg
    from support.pipeline_helpers import resources_for, write_config

    from assets.images import engine_images
    from assets.partitions import image_versions
    from strix_pipeline.config_load import load_config

    config_path = write_config(tmp_path)
    text = config_path.read_text()
    source = (
        f'images = [{{ registry = "{env.front.host}", repository = "{REPO}", '
        f"include = ['^server-rocm-b\\d+$'], insecure = true }}]"
    )
    text = text.replace('role = "baseline"\nimages = []', f'role = "baseline"\n{source}', 1)
    assert source in text
    config_path.write_text(text)
    target = load_config(config_path).warehouse_path()
    target.parent.mkdir(parents=True)
    shutil.copy(env.template, target)
    mine = f"SELECT * FROM images WHERE registry = '{env.front.host}' ORDER BY tag"
    with Warehouse.open(target, read_only=True) as w:
        before = w.query_df(mine)
    assert before["tag"].to_list() == KNOWN

    env.front.faults.clear()
    env.front.add_fault(r"/tags/list$", Fault(503), times=3)
    with dg.instance_for_test() as instance:
        result = dg.materialize([engine_images], resources=resources_for(config_path), instance=instance)
        assert result.success
        (mat,) = result.asset_materializations_for_node("engine_images")
        assert mat.metadata["registry_errors"].value == 1 and mat.metadata["new"].value == 0
        assert f"RegistryUnavailable: {env.front.host}/{REPO}" in mat.metadata["errors"].value
        keys = instance.get_dynamic_partitions(image_versions.name)
        assert not [k for k in keys if "b102" in k or "b103" in k]
    env.front.faults.clear()
    with Warehouse.open(target, read_only=True) as w:
        assert w.query_df(mine).equals(before)
        (error,) = w.query_df("SELECT error FROM registry_errors")["error"].to_list()
    assert (
        error.startswith(f"RegistryUnavailable: {env.front.host}/{REPO}: ")
        and "503 after 3 attempts" in error
    )
