"""Compile-cache volumes held to a budget (hosts/cleanup/cache_prune.py) over a docker-py stand-in: the oldest
go first, never one a planned run needs or a container mounts; what the budget still allows is what
the disk check counts. The real volumes on dockerd: tests/integration/docker/test_box_disk.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from strix_pipeline.hosts.box.stop_checks import sized_pulls
from strix_pipeline.hosts.cleanup import cache_prune
from strix_pipeline.hosts.cleanup.cache_prune import hold_to_budget, of_digests, volume_name
from strix_pipeline.registry.errors import RegistryError

MB = 10**6


@dataclass
class Volume:
    name: str
    gone: list[str]
    refuse: bool = False

    def remove(self) -> None:
        if self.refuse:
            raise RuntimeError("volume is in use")
        self.gone.append(self.name)


@dataclass
class Container:
    attrs: dict


@dataclass
class Client:
    volumes_df: list[dict]
    mounted: list[str] = field(default_factory=list)
    refusing: set[str] = field(default_factory=set)
    gone: list[str] = field(default_factory=list)

    def df(self) -> dict:
        return {"Volumes": self.volumes_df}

    @property
    def containers(self):
        client = self

        class Containers:
            def list(self, all: bool = False):  # noqa: A002 - docker-py's keyword
                return [Container({"Mounts": [{"Type": "volume", "Name": n} for n in client.mounted]})]

        return Containers()

    @property
    def volumes(self):
        client = self

        class Volumes:
            def get(self, name: str) -> Volume:
                return Volume(name, client.gone, name in client.refusing)

        return Volumes()


def vol(name: str, mb: int, created: str, refs: int = 0) -> dict:
    return {"Name": name, "CreatedAt": created, "UsageData": {"Size": mb * MB, "RefCount": refs}}


def test_the_oldest_volumes_no_planned_run_needs_go_until_the_rest_fit_the_budget():
    old, older, needed, newest = (volume_name("vllm", f"sha256:{c * 64}") for c in "abcd")
    client = Client(
        [
            vol(newest, 300, "2026-12-05T03:00:00Z"),
            vol(old, 300, "2026-11-28T03:00:00Z"),
            vol(older, 300, "2026-11-21T03:00:00Z"),
            vol(needed, 300, "2026-11-14T03:00:00Z"),  # the oldest, but a planned run needs it
            vol("someone-elses-volume", 5000, "2026-01-01T00:00:00Z"),  # not a compile cache: untouched
        ]
    )
    done = hold_to_budget(client, 700 * MB, keep=of_digests({"sha256:" + "c" * 64}))
    assert client.gone == [older, old] == done.removed
    assert done.total_bytes == 600 * MB and done.freed_bytes == 600 * MB
    assert done.over_kept == [needed] and done.allowance_bytes == 100 * MB
    assert "removed 2 no planned run needs (0.60 GB)" in done.describe()


def test_a_volume_in_use_is_kept_and_within_budget_nothing_goes():
    a, b = volume_name("vllm", "sha256:" + "1" * 64), volume_name("sglang", "sha256:" + "2" * 64)
    client = Client(
        [vol(a, 500, "2026-11-01T00:00:00Z"), vol(b, 500, "2026-11-02T00:00:00Z", refs=1)], mounted=[a]
    )
    done = hold_to_budget(client, 100 * MB, keep=of_digests(set()))
    assert client.gone == [] and done.over_kept == [a, b] and done.allowance_bytes == 0
    assert hold_to_budget(client, 2000 * MB, keep=of_digests(set())).removed == []
    refused = Client([vol(a, 500, "2026-11-01T00:00:00Z")], refusing={a})
    assert hold_to_budget(refused, 0, keep=of_digests(set())).over_kept == [
        a
    ]  # mounted meanwhile: kept, said


def test_a_needed_image_keeps_its_cache_whichever_engine_compiled_into_it():
    keep = of_digests({"ghcr.io/x/y@sha256:" + "ab" * 32})
    assert keep(volume_name("vllm", "sha256:" + "ab" * 32)) and keep(
        volume_name("sglang", "sha256:" + "ab" * 32)
    )
    assert not keep(volume_name("vllm", "sha256:" + "cd" * 32)) and not keep("ab" * 8)


def test_the_volume_name_is_the_launchers_spelling():
    assert volume_name("vllm", "ghcr.io/x/y@sha256:" + "ab" * 32) == "strix-compile-cache-vllm-" + "ab" * 8
    assert volume_name("vllm", "sha256:" + "ab" * 32).startswith(cache_prune.PREFIX)


def test_pull_sizes_a_registry_cannot_give_fall_back_to_the_largest_image_and_say_why():
    def unreachable():
        raise RegistryError("127.0.0.1:9: GET /v2/x/manifests/y: ConnectError after 2 attempts")

    sized, why = sized_pulls(unreachable)
    assert sized is None and why is not None and "ConnectError" in why and "largest image" in why
    assert sized_pulls(None) == (None, None)
    assert sized_pulls(lambda: []) == ([], None)
