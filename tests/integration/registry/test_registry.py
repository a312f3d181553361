"""The registry client against a real docker-registry on loopback, with fronts that page, demand tokens,
imitate the Docker Hub tags API and inject faults."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.infra import (
    Registry,
    build_image,
    free_port,
    make_index,
    push,
    put_manifest,
    remove_image,
    start_registry,
    tag_many,
)
from support.registry_fronts import Fault, Front, recording_sleep

from strix_pipeline.registry.client import OCI_INDEX, RegistryClient, parse_time
from strix_pipeline.registry.errors import (
    AuthError,
    MalformedResponse,
    NoPlatform,
    NotFound,
    RateLimited,
    RegistryUnavailable,
)
from strix_pipeline.registry.transport import RetryPolicy, parse_challenge
from strix_pipeline.registry.versions import version_sort_key

pytestmark = [pytest.mark.registry, pytest.mark.docker]

MANY = "strix/many"
MULTI = "strix/multi"
N_TAGS = 121


@dataclass
class Populated:
    reg: Registry
    base_digest: str
    amd_digest: str
    arm_digest: str
    index_digest: str
    tmp: Path


@pytest.fixture(scope="module")
def populated(
    registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Populated]:
    tmp = tmp_path_factory.mktemp("registry")
    reg = start_registry(tmp)
    pushed: list[str] = []
    try:
        base = f"{reg.host}/{MANY}:base"
        build_image(
            base,
            {"/etc/strix": b"many"},
            labels={
                "org.opencontainers.image.version": "1.2.3",
                "org.opencontainers.image.revision": "abc123",
            },
        )
        pushed.append(base)
        base_digest = push(base)
        tag_many(reg.url, MANY, "base", [f"t{i:03d}" for i in range(N_TAGS - 1)])

        amd, arm = f"{reg.host}/{MULTI}:amd", f"{reg.host}/{MULTI}:arm"
        build_image(amd, {"/etc/strix": b"amd"}, labels={"org.opencontainers.image.version": "2.0.0"})
        build_image(arm, {"/etc/strix": b"arm"}, labels={"org.opencontainers.image.version": "2.0.0-arm"})
        pushed += [amd, arm]
        amd_digest, arm_digest = push(amd), push(arm)
        index = make_index(reg.url, MULTI, [("arm", "linux", "arm64"), ("amd", "linux", "amd64")])
        index_digest = put_manifest(reg.url, MULTI, "index", index, OCI_INDEX)
        put_manifest(
            reg.url, MULTI, "armonly", make_index(reg.url, MULTI, [("arm", "linux", "arm64")]), OCI_INDEX
        )
        yield Populated(reg, base_digest, amd_digest, arm_digest, index_digest, tmp)
    finally:
        for t in pushed:
            remove_image(t)
        reg.stop()


def client_for(host: str, **kw) -> RegistryClient:
    kw.setdefault("policy", RetryPolicy(attempts=4, backoff_s=0.01, backoff_max_s=0.05))
    return RegistryClient(host, insecure=True, **kw)


# -- listing ----------------------------------------------------------------------------------------


def test_tags_in_one_answer_from_the_real_registry(populated: Populated) -> None:
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        tags, complete = c.list_tags(MANY, page_size=25)
    assert complete
    assert len(tags) == N_TAGS and len(set(tags)) == N_TAGS
    # distribution 2.8 ignores n: everything arrives in one answer without a Link
    assert len(front.requests_to(r"/tags/list$")) == 1


def test_tags_page_by_page_through_link(populated: Populated) -> None:
    with Front(populated.reg.url, page_size=25) as front, client_for(front.host) as c:
        tags, complete = c.list_tags(MANY, page_size=100)
    assert complete
    assert sorted(tags) == sorted(set(tags)) and len(tags) == N_TAGS
    pages = front.requests_to(r"/tags/list$")
    assert len(pages) == math.ceil(N_TAGS / 25)
    assert "last" not in pages[0].query and all("last" in p.query for p in pages[1:])


def test_prefix_listing_seeks_with_last_and_stops_past_the_prefix(populated: Populated) -> None:
    with Front(populated.reg.url, page_size=25) as front, client_for(front.host) as c:
        tags, complete = c.list_tags(MANY, prefix="t05")
    assert complete and tags == [f"t05{i}" for i in range(10)]
    pages = front.requests_to(r"/tags/list$")
    assert pages[0].query["last"] == ["t0"] and len(pages) == 3  # t000-t024, t025-t049, t050-t074: stop
    with client_for(populated.reg.host) as c:  # distribution 2.8: one answer, filtered all the same
        unpaged, complete = c.list_tags(MANY, prefix="t05")
    assert complete and sorted(unpaged) == tags


def test_max_tags_stops_early_and_says_incomplete(populated: Populated) -> None:
    with Front(populated.reg.url, page_size=25) as front, client_for(front.host) as c:
        tags, complete = c.list_tags(MANY, max_tags=30)
    assert len(tags) == 30 and not complete
    assert len(front.requests_to(r"/tags/list$")) == 2


def test_docker_hub_tags_api_pages_with_next_and_gives_digests(populated: Populated) -> None:
    with (
        Front(populated.reg.url, hub=True, hub_page_size=50) as front,
        client_for(populated.reg.host, hub_api=front.url) as c,
    ):
        infos, complete = c.hub_tags(MANY)
    assert complete and len(infos) == N_TAGS
    assert {i.digest for i in infos} == {populated.base_digest}
    assert all(i.last_updated is not None and i.platforms == ("linux/amd64",) for i in infos)
    assert len(front.requests_to(r"/v2/namespaces/")) == math.ceil(N_TAGS / 50)


def test_a_listing_that_pages_back_to_itself_is_refused(populated: Populated) -> None:
    first = f"/v2/{MANY}/tags/list?n=100"
    page = Fault(
        200, {"Content-Type": "application/json", "Link": f'<{first}>; rel="next"'}, b'{"tags": ["a"]}'
    )
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        front.add_fault(r"/tags/list$", page, times=2)
        with pytest.raises(MalformedResponse, match="tags/list pagination loops at .*tags/list\\?n=100"):
            c.list_tags(MANY)
        assert len(front.requests_to(r"/tags/list$")) == 1  # the repeated page is never fetched


def test_docker_hub_next_that_is_not_a_url_is_refused(populated: Populated) -> None:
    with (
        Front(populated.reg.url, hub=True) as front,
        client_for(populated.reg.host, hub_api=front.url) as c,
    ):
        front.add_fault(
            r"/v2/namespaces/",
            Fault(200, {"Content-Type": "application/json"}, b'{"results": [], "next": 5}'),
        )
        with pytest.raises(MalformedResponse, match="'next' is not a URL"):
            c.hub_tags(MANY)


# -- digests, manifests, configs ----------------------------------------------------------------------


def test_head_digest_matches_push_and_details_come_from_config(populated: Populated) -> None:
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        digest, media_type = c.head_digest(MANY, "t007")
        details = c.image_details(MANY, "t007")
    assert digest == populated.base_digest
    assert media_type == "application/vnd.docker.distribution.manifest.v2+json"
    heads = front.requests_to(r"/manifests/t007$", "HEAD")
    assert len(heads) == 1 and "application/vnd.oci.image.index.v1+json" in heads[0].headers["accept"]
    assert details.digest == populated.base_digest == details.manifest_digest
    assert details.version == "1.2.3" and details.revision == "abc123"
    assert details.created is not None and abs(time.time() - details.created.timestamp()) < 3600


def test_index_gives_the_linux_amd64_config(populated: Populated) -> None:
    with client_for(populated.reg.host) as c:
        digest, media_type = c.head_digest(MULTI, "index")
        details = c.image_details(MULTI, "index")
    assert media_type == OCI_INDEX and digest == populated.index_digest
    assert details.digest == populated.index_digest
    assert details.manifest_digest == populated.amd_digest != populated.arm_digest
    assert details.version == "2.0.0"


def test_index_without_linux_amd64_is_skipped_with_a_reason(populated: Populated) -> None:
    with client_for(populated.reg.host) as c, pytest.raises(NoPlatform) as e:
        c.image_details(MULTI, "armonly")
    assert "linux/amd64" in str(e.value) and "linux/arm64" in str(e.value)


def test_unknown_tag_is_not_found(populated: Populated) -> None:
    with client_for(populated.reg.host) as c, pytest.raises(NotFound):
        c.head_digest(MANY, "no-such-tag")


# -- authentication -----------------------------------------------------------------------------------


def test_bearer_token_from_the_challenge(populated: Populated) -> None:
    with Front(populated.reg.url, bearer=True, page_size=50) as front, client_for(front.host) as c:
        tags, _ = c.list_tags(MANY)
        digest, _ = c.head_digest(MANY, "base")
        details = c.image_details(MANY, "base")
    assert len(tags) == N_TAGS and digest == populated.base_digest and details.version == "1.2.3"
    tokens = front.requests_to(r"^/token$")
    assert len(tokens) == 1  # cached per scope
    assert tokens[0].query == {"scope": [f"repository:{MANY}:pull"], "service": ["strix-test"]}
    # one 401 to learn the challenge, then every registry request carries the token
    authed = [
        s
        for s in front.seen
        if s.path.startswith("/v2/") and s.headers.get("authorization", "").startswith("Bearer ")
    ]
    assert len(authed) == len([s for s in front.seen if s.path.startswith("/v2/")]) - 1


def test_bearer_token_service_with_credentials(populated: Populated) -> None:
    with Front(populated.reg.url, bearer=True, token_credentials=("bot", "s3cret")) as front:
        with client_for(front.host) as anon, pytest.raises(AuthError):
            anon.list_tags(MANY)
        with client_for(front.host, username="bot", password="wrong") as bad, pytest.raises(AuthError):
            bad.list_tags(MANY)
        with client_for(front.host, username="bot", password="s3cret") as good:
            tags, _ = good.list_tags(MANY)
    assert len(tags) == N_TAGS


def test_basic_auth_registry(populated: Populated) -> None:
    with start_registry(populated.tmp, htpasswd={"alice": "pw1"}, storage=populated.reg.storage) as secured:
        with client_for(secured.host, username="alice", password="pw1") as c:
            tags, _ = c.list_tags(MANY)
            digest, _ = c.head_digest(MANY, "base")
        with client_for(secured.host) as anon, pytest.raises(AuthError, match="basic auth"):
            anon.list_tags(MANY)
        with client_for(secured.host, username="alice", password="nope") as bad, pytest.raises(AuthError):
            bad.list_tags(MANY)
    assert len(tags) == N_TAGS and digest == populated.base_digest


# -- faults -------------------------------------------------------------------------------------------


def test_429_retry_after_then_success(populated: Populated) -> None:
    waits, sleep = recording_sleep()
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep) as c:
        front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "7", "ratelimit-remaining": "0;w=21600"}))
        tags, _ = c.list_tags(MANY)
        assert len(tags) == N_TAGS
        assert waits == [7.0]
        assert len(front.requests_to(r"/tags/list$")) == 2
        assert c.image_details(MANY, "base").version == "1.2.3"  # the wait restored the budget


def test_429_longer_than_we_wait_is_rate_limited(populated: Populated) -> None:
    waits, sleep = recording_sleep()
    policy = RetryPolicy(attempts=4, backoff_s=0.01, max_wait_s=60)
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep, policy=policy) as c:
        front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "3600"}))
        with pytest.raises(RateLimited) as e:
            c.list_tags(MANY)
    assert e.value.retry_after_s == 3600 and waits == []


def test_exhausted_pull_budget_stops_manifest_gets(populated: Populated) -> None:
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        front.add_fault(
            r"/tags/list$",
            Fault(
                200, {"ratelimit-remaining": "0;w=21600", "ratelimit-limit": "100;w=21600"}, b'{"tags":[]}'
            ),
        )
        c.list_tags(MANY)
        assert c.rate_limit.remaining == 0 and c.rate_limit.limit == 100 and c.rate_limit.window_s == 21600
        c.head_digest(MANY, "base")  # HEAD is free
        with pytest.raises(RateLimited):
            c.image_details(MANY, "base")
    assert front.requests_to(r"/manifests/", "GET") == []


def test_burst_of_5xx_is_retried_with_backoff(populated: Populated) -> None:
    waits, sleep = recording_sleep()
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep) as c:
        front.add_fault(r"/manifests/base$", Fault(503), times=2)
        front.add_fault(r"/manifests/base$", Fault(502))
        digest, _ = c.head_digest(MANY, "base")
    assert digest == populated.base_digest
    assert len(waits) == 3 and waits[0] < waits[2]  # exponential


def test_5xx_that_does_not_stop_gives_up_after_the_attempts(populated: Populated) -> None:
    waits, sleep = recording_sleep()
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep) as c:
        front.add_fault(r"/manifests/base$", Fault(500), times=10)
        with pytest.raises(RegistryUnavailable, match="500 after 4 attempts"):
            c.head_digest(MANY, "base")
    assert len(front.requests_to(r"/manifests/base$")) == 4 and len(waits) == 3


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (r"/tags/list$", b'{"name": "strix/many", "tags": ["a", '),
        (r"/tags/list$", b'{"name": "strix/many", "tags": "t000"}'),
        (r"/tags/list$", b"<html>gateway</html>"),
    ],
)
def test_malformed_tags_body_is_a_typed_error(populated: Populated, path: str, body: bytes) -> None:
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        front.add_fault(path, Fault(200, {"Content-Type": "application/json"}, body))
        with pytest.raises(MalformedResponse):
            c.list_tags(MANY)


def test_malformed_manifest_is_a_typed_error(populated: Populated) -> None:
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        front.add_fault(r"/manifests/base$", Fault(200, {"Content-Type": OCI_INDEX}, b'{"manifests": 3}'))
        with pytest.raises(MalformedResponse):
            c.image_details(MANY, "base")


def test_unreachable_registry_fails_fast() -> None:
    waits, sleep = recording_sleep()
    start = time.monotonic()
    with client_for(f"127.0.0.1:{free_port()}", sleep=sleep) as c, pytest.raises(RegistryUnavailable):
        c.list_tags(MANY)
    assert time.monotonic() - start < 5 and len(waits) == 3


def test_deadline_bounds_the_time_spent(populated: Populated) -> None:
    start = time.monotonic()
    with Front(populated.reg.url) as front, client_for(front.host) as c:
        front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "30"}))
        with c.deadline(1.0), pytest.raises(RateLimited, match="time budget"):
            c.list_tags(MANY)
    assert time.monotonic() - start < 5


# -- pure helpers -------------------------------------------------------------------------------------


def test_parse_challenge_and_time() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:vllm/x:pull"'
    )
    assert (
        scheme == "bearer" and params["service"] == "registry.docker.io" and params["scope"].endswith(":pull")
    )
    t = parse_time("2026-01-02T03:04:05.123456789Z")
    assert t is not None and t.microsecond == 123456 and t.utcoffset().total_seconds() == 0
    assert parse_time("0001-01-01T00:00:00Z") is None and parse_time("yesterday") is None


def test_version_sort_key_is_importable_from_registry() -> None:
    assert version_sort_key("v1.2.3", None) < version_sort_key("v1.10.0", None)


def test_429_without_retry_after_waits_for_the_rate_limit_reset(populated: Populated) -> None:
    waits, sleep = recording_sleep()
    reset = int(time.time()) + 30
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep) as c:
        front.add_fault(
            r"/tags/list$", Fault(429, {"X-RateLimit-Reset": str(reset), "X-RateLimit-Remaining": "0"})
        )
        tags, _ = c.list_tags(MANY)
    assert len(tags) == N_TAGS and len(waits) == 1 and 25 <= waits[0] <= 31


def test_429_with_an_http_date(populated: Populated) -> None:
    import email.utils

    waits, sleep = recording_sleep()
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    with Front(populated.reg.url) as front, client_for(front.host, sleep=sleep) as c:
        front.add_fault(r"/manifests/base$", Fault(429, {"Retry-After": when}))
        digest, _ = c.head_digest(MANY, "base")
    assert digest == populated.base_digest and len(waits) == 1 and 15 <= waits[0] <= 21
