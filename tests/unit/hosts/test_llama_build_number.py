"""llama-server built from the package index's source archive says ``b0-unknown``: the run records the
build number the package names instead, and leaves a real build_info or a user's own binary alone."""

from strix_pipeline.hosts.local.llama_server import known_build


def test_source_archive_build_gets_the_package_number() -> None:
    assert known_build("b0-unknown", "11434.0.0") == "b11434-unknown"
    assert known_build(None, "11401.0.0") == "b11401-unknown"


def test_a_build_that_knows_itself_is_kept() -> None:
    assert known_build("b11434-1d2e3f4", "11434.0.0") == "b11434-1d2e3f4"


def test_a_users_own_binary_is_not_relabelled() -> None:
    assert known_build("b0-unknown", None) == "b0-unknown"
    assert known_build("b0-unknown", "dev") == "b0-unknown"
