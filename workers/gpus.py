"""Find the GPUs of this host without initialising any runtime (workers are pinned before that)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
NVIDIA_SMI_TIMEOUT_S = 20


@dataclass(frozen=True)
class Gpu:
    index: int  # the index ROCR_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES take
    arch: str
    vendor: str  # "amd" | "nvidia"
    name: str = ""
    uuid: str = ""


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (e.g. 90010) as an LLVM target name (gfx90a)."""
    major, minor, stepping = target_version // 10000, (target_version // 100) % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def amd_gpus(nodes: Path = KFD_NODES) -> list[Gpu]:
    """KFD topology nodes with a gfx target are GPUs (CPU nodes report 0), in ROCr enumeration order."""
    found: list[tuple[int, str]] = []
    if not nodes.is_dir():
        return []
    for node in sorted(nodes.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        try:
            props = dict(
                line.split(None, 1) for line in (node / "properties").read_text().splitlines() if " " in line
            )
        except OSError:
            continue
        version = int(props.get("gfx_target_version", "0").strip() or 0)
        if version:
            found.append((version, node.name))
    return [Gpu(index, gfx_name(version), "amd") for index, (version, _) in enumerate(found)]


def nvidia_gpus() -> list[Gpu]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    argv = [smi, "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus: list[Gpu] = []
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            gpus.append(Gpu(int(parts[0]), "sm_" + parts[3].replace(".", ""), "nvidia", parts[2], parts[1]))
    return gpus


def detect_gpus() -> list[Gpu]:
    return amd_gpus() + nvidia_gpus()


def pinning_env(gpu: Gpu | None, index: int | None, arch: str) -> dict[str, str]:
    """Environment that pins a worker to one device (set before any runtime initialises)."""
    if index is None:
        return {}
    if arch.startswith("sm_") or (gpu is not None and gpu.vendor == "nvidia"):
        return {"CUDA_VISIBLE_DEVICES": str(index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return {"ROCR_VISIBLE_DEVICES": str(index)}
