"""The example Box config, docs/box.md's owner section and `strix doctor` say the same things."""

from __future__ import annotations

import re

from support.paths import REPO

from strix_pipeline.config_load import load_config
from strix_pipeline.engines import MODULES
from strix_pipeline.hosts.box import stop_checks

PAGE = (REPO / "docs" / "box.md").read_text()
BOX = PAGE[PAGE.index("## What the Box's owner sets up") : PAGE.index("## A week that fits")]
EXAMPLE = load_config(REPO / "config" / "strix-halo.example.toml")


def test_every_doctor_line_before_the_stop_is_named_in_the_box_page():
    names = [
        stop_checks.PRODUCTION,
        stop_checks.MODELS,
        stop_checks.PORT.format(port="<N>"),
        stop_checks.GPU.format(target=EXAMPLE.hosts["strix-halo"].gpu_target),
        stop_checks.DISK,
    ]
    flat = " ".join(BOX.split())
    assert [n for n in names if f"`{n}`" not in flat] == []


def test_the_fenced_ports_are_the_example_configs_and_none_is_productions():
    fenced = {int(p) for p in re.search(r"dport \{ ([0-9, ]+) \}", BOX).group(1).split(",")}
    ports = {e.port for e in EXAMPLE.engines.values()}
    assert fenced == ports
    assert not ports & {m.PRODUCTION_PORT for m in MODULES.values()}


def test_the_owner_settings_the_box_page_names_are_the_configs():
    host = EXAMPLE.hosts["strix-halo"]
    for key in ("ttm.pages_limit", "amdgpu.gttsize", "iommu=pt", "idle_baseline_gb", "min_free_disk_gb"):
        assert key in BOX, key
    assert f"`min_free_disk_gb` ({host.min_free_disk_gb:g} in the example" in " ".join(BOX.split())
    assert "sudo -n" in BOX and "NOPASSWD" in BOX
