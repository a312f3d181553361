"""Memory counters of a host, sampled in the background during a run, and the run's memory summary.

Re-exports only: ``tree`` reads counters from a root tree, ``smi`` parses the SMI tools, ``probes`` says
where readings come from, ``sampler`` samples them during a run, ``summary`` turns samples into the
run's figures. Why no single counter is trusted on unified memory: docs/architecture.md.
"""

from strix_pipeline.memory.probes import (
    PROBE_NAME,
    DockerProbe,
    MemoryProbe,
    TreeProbe,
    lay_out_tree,
    parse_probe_output,
)
from strix_pipeline.memory.sampler import MemorySampler
from strix_pipeline.memory.smi import (
    SMI_PHASES,
    SmiRead,
    SmiSource,
    counter_disagreements,
    parse_amd_smi_json,
    parse_rocm_smi_json,
    read_smi,
    run_here,
)
from strix_pipeline.memory.summary import (
    MEMORY_UNRELIABLE,
    MemorySummary,
    choose_basis,
    current_in_use,
    in_use,
    meminfo_disagreement,
    summarize,
    wait_until,
)
from strix_pipeline.memory.tree import (
    PAGE_SIZE,
    SYSFS_FILES,
    HostMemoryFacts,
    Reading,
    parse_meminfo,
    read_amdgpu_sysfs,
    read_engine_rss,
    read_host_facts,
    read_kernel_cmdline,
    read_meminfo,
    read_process_rss,
    read_tree,
    read_ttm_pages_limit,
    read_vbios,
)

__all__ = [
    "MEMORY_UNRELIABLE",
    "PAGE_SIZE",
    "PROBE_NAME",
    "SMI_PHASES",
    "SYSFS_FILES",
    "SmiRead",
    "SmiSource",
    "DockerProbe",
    "HostMemoryFacts",
    "MemoryProbe",
    "MemorySampler",
    "MemorySummary",
    "Reading",
    "TreeProbe",
    "choose_basis",
    "counter_disagreements",
    "current_in_use",
    "in_use",
    "lay_out_tree",
    "meminfo_disagreement",
    "parse_amd_smi_json",
    "parse_meminfo",
    "parse_probe_output",
    "parse_rocm_smi_json",
    "read_amdgpu_sysfs",
    "read_engine_rss",
    "read_host_facts",
    "read_kernel_cmdline",
    "read_meminfo",
    "read_process_rss",
    "read_smi",
    "read_tree",
    "read_ttm_pages_limit",
    "read_vbios",
    "run_here",
    "summarize",
    "wait_until",
]
