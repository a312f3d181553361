"""The engine image's facts: ROCm version sources in order, firmware summaries from amd-smi / rocm-smi
JSON."""

from __future__ import annotations

from support.paths import FIXTURES

from strix_pipeline import engine_facts as ef

SMI = FIXTURES / "smi"


def test_rocm_version_file_then_env_then_label_else_not_available() -> None:
    env = ["PATH=/usr/bin", "ROCM_VERSION=6.3.1"]
    labels = {"com.amd.rocm.version": "6.2.4"}
    assert ef.rocm_version_from("6.4.1-120\n", env, labels) == "6.4.1-120"
    assert ef.rocm_version_from(None, env, labels) == "6.3.1"
    assert ef.rocm_version_from("cat: can't open '/opt/rocm/.info/version'", ["A=1"], labels) == "6.2.4"
    assert ef.rocm_version_from(None, [], {"rocm.version": "7.0.2"}) == "7.0.2"
    # nothing, an empty value, garbage: not available (None), never "" that would match another
    assert ef.rocm_version_from(None, None, None) is None
    assert ef.rocm_version_from("", ["ROCM_VERSION="], {"rocm.version": ""}) is None
    assert ef.rocm_version_from("\n", ["ROCM_VERSION=latest"], {}) is None


def test_amd_smi_firmware_fixture_gives_a_sorted_compact_summary_without_absent_versions() -> None:
    gpus = ef.parse_amd_smi_firmware((SMI / "amd-smi-firmware.json").read_text())
    assert len(gpus) == 1 and ("CP_ME", "35") in gpus[0]
    summary = ef.firmware_summary(gpus)
    assert summary == (
        "fw "
        "CP_ME=35,CP_MEC1=61,CP_PFP=55,PM=00.100.64.00,PSP_SOSDRV=00.36.01.35,RLC=108,SDMA0=14,VCN=0x09118012"
    )
    assert "ASD" not in summary  # "N/A" is left out


def test_amd_smi_gpu_data_shape_with_two_gpus() -> None:
    gpus = ef.parse_amd_smi_firmware((SMI / "amd-smi-firmware-gpu-data.json").read_text())
    assert ef.firmware_summary(gpus) == "fw gpu0:CP_ME=35,RLC=108 gpu1:CP_ME=36"


def test_rocm_smi_fwinfo_fixture_drops_zero_and_non_firmware_keys() -> None:
    gpus = ef.parse_rocm_smi_firmware((SMI / "rocm-smi-fwinfo.json").read_text())
    summary = ef.firmware_summary(gpus)
    assert summary is not None and summary.startswith("fw ASD=0x21000116,ME=35,MEC=61,MEC2=61,PFP=55,")
    assert "RLC_SRLC" not in summary and "CE=" not in summary and "SKU" not in summary
    assert "SMC=00.100.64.00" in summary and "TA_RAS" not in summary  # all zeros: not loaded


def test_read_firmware_prefers_amd_smi_falls_back_to_rocm_smi_and_a_missing_tool_changes_nothing() -> None:
    amd = (SMI / "amd-smi-firmware.json").read_text()
    rocm = (SMI / "rocm-smi-fwinfo.json").read_text()

    def both(argv: list[str]) -> tuple[int, str]:
        return 0, amd if argv[0] == "amd-smi" else rocm

    def only_rocm(argv: list[str]) -> tuple[int, str]:
        if argv[0] == "amd-smi":
            return 127, 'OCI runtime exec failed: exec: "amd-smi": executable file not found'
        return 0, rocm

    def none(argv: list[str]) -> tuple[int, str]:
        raise FileNotFoundError(argv[0])

    assert ef.read_firmware(both).startswith("fw CP_ME=35")
    assert ef.read_firmware(only_rocm).startswith("fw ASD=")
    assert ef.read_firmware(none) is None
    assert ef.read_firmware(lambda argv: (0, "not json")) is None
    assert ef.append_firmware("vbios card1=113-STRXLGEN-001", "fw ME=35") == (
        "vbios card1=113-STRXLGEN-001; fw ME=35"
    )
    assert ef.append_firmware("vbios card1=x", None) == "vbios card1=x"
    assert ef.append_firmware(None, "fw ME=35") == "fw ME=35"
    assert ef.append_firmware(None, None) is None
