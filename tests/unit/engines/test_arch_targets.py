"""The architecture gate's reading of an arch-list command, and which executable an image source starts."""

from __future__ import annotations

import pytest

from strix_pipeline.config import EngineConfig, ImageSource
from strix_pipeline.engines import arch_list_command, executable_for, image_source, llamacpp, sglang, vllm
from strix_pipeline.engines.base import parse_compiled_targets


def test_components_and_their_targets_are_read_from_each_line():
    found = parse_compiled_targets(
        "torch: gfx90a;gfx942;gfx950\n\nsgl_kernel/common_ops.so: gfx942\n/app/libggml-hip.so: none\n"
    )
    assert found.components == {
        "torch": ("gfx90a", "gfx942", "gfx950"),
        "sgl_kernel/common_ops.so": ("gfx942",),
        "/app/libggml-hip.so": (),
    }
    assert set(found.missing("gfx1151")) == {"torch", "sgl_kernel/common_ops.so", "/app/libggml-hip.so"}
    assert found.missing("gfx942") == {"/app/libggml-hip.so": ()}


def test_a_build_for_gfx1151_passes_and_no_output_is_a_portable_build():
    assert parse_compiled_targets("torch: gfx1100;gfx1151;gfx1201\n").missing("gfx1151") == {}
    nothing = parse_compiled_targets("")
    assert nothing.components == {} and nothing.missing("gfx1151") == {}
    assert "no GPU-specific code" in nothing.describe()


def test_every_engine_declares_an_arch_list_command():
    assert (
        vllm.ARCH_LIST_COMMAND[:2] == ["python3", "-c"] and "_cuda_getArchFlags" in vllm.ARCH_LIST_COMMAND[2]
    )
    assert "sgl_kernel" in sglang.ARCH_LIST_COMMAND[2] and "_cuda_getArchFlags" in sglang.ARCH_LIST_COMMAND[2]
    assert "libggml-hip" in llamacpp.ARCH_LIST_COMMAND[2]
    # the snippets compile: a typo would be a refusal of every image on the Box
    compile(vllm.ARCH_LIST_COMMAND[2], "vllm", "exec")
    compile(sglang.ARCH_LIST_COMMAND[2], "sglang", "exec")


@pytest.mark.parametrize(
    ("source_exe", "engine_exe", "expect"),
    [
        (["/usr/local/bin/llama-server"], ["/app/llama-server"], ["/usr/local/bin/llama-server"]),
        (None, ["/app/llama-server"], ["/app/llama-server"]),
        (None, None, ["llama-server"]),
    ],
)
def test_the_image_sources_executable_wins_then_the_engines_then_the_default(source_exe, engine_exe, expect):
    source = ImageSource(
        registry="docker.io", repository="kyuz0/amd-strix-halo-toolboxes", executable=source_exe
    )
    engine = EngineConfig(kind="llamacpp", executable=engine_exe, images=[source])
    assert image_source(engine, "docker.io", "kyuz0/amd-strix-halo-toolboxes") is engine.images[0]
    assert image_source(engine, "ghcr.io", "kyuz0/amd-strix-halo-toolboxes") is None
    assert (
        executable_for(engine, image_source(engine, "docker.io", "kyuz0/amd-strix-halo-toolboxes")) == expect
    )


def test_a_source_may_skip_the_gate_or_give_its_own_command():
    vulkan = ImageSource(registry="ghcr.io", repository="ggml-org/llama.cpp", arch_list_command=[])
    engine = EngineConfig(kind="llamacpp", images=[vulkan])
    assert arch_list_command(engine, vulkan) == []
    assert arch_list_command(engine, None) == llamacpp.ARCH_LIST_COMMAND
    with pytest.raises(ValueError, match="executable"):
        ImageSource(registry="docker.io", repository="a/b", executable=[])
