"""AMD GPU discovery without initialising a runtime, and ``ROCR_VISIBLE_DEVICES`` pinning.

Sources, best first per field: the KFD topology in sysfs (arch from ``gfx_target_version``, CU
count = ``simd_count / simd_per_cu``, ``unique_id``; always present where the amdgpu driver is),
``rocm-smi --json`` / ``amd-smi static --json`` for marketing names and driver versions, the
ROCm install's ``.info/version``. HIP device properties (gcnArchName, multiProcessorCount) come
from the harness probe (``python -m workers.harness.hip_runner --probe``), a subprocess, so a
worker process never initialises HIP before it is pinned.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.gpus import gfx_name

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
ROCM_ROOT = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
SMI_TIMEOUT_S = 20


@dataclass(frozen=True)
class AmdDevice:
    index: int  # what ROCR_VISIBLE_DEVICES takes (KFD GPU order)
    arch: str
    compute_units: int
    uuid: str
    name: str = ""
    driver_version: str = ""
    rocm_version: str = ""


def _properties(node: Path) -> dict[str, str]:
    text = (node / "properties").read_text()
    return dict(line.split(None, 1) for line in text.splitlines() if " " in line.strip())


def kfd_devices(nodes: Path = KFD_NODES) -> list[AmdDevice]:
    """GPU nodes of the KFD topology (CPU nodes have gfx_target_version 0), in enumeration order."""
    if not nodes.is_dir():
        return []
    found: list[AmdDevice] = []
    ordered = sorted(nodes.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30)
    for node in ordered:
        try:
            props = _properties(node)
        except OSError:
            continue
        version = int(props.get("gfx_target_version", "0").strip() or 0)
        if not version:
            continue
        simd_count = int(props.get("simd_count", "0"))
        simd_per_cu = int(props.get("simd_per_cu", "0")) or 4
        unique = int(props.get("unique_id", "0"))
        uuid = (
            f"GPU-{unique:016x}"
            if unique
            else f"kfd-node{node.name}-loc{props.get('location_id', '0').strip()}"
        )
        found.append(AmdDevice(len(found), gfx_name(version), simd_count // simd_per_cu, uuid))
    return found


def rocm_version(root: Path = ROCM_ROOT) -> str:
    path = root / ".info" / "version"
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _run_json(argv: list[str]) -> Any:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None


def _pick(record: dict[str, Any], *keys: str) -> str:
    lowered = {k.lower(): v for k, v in record.items()}
    for key in keys:
        value = lowered.get(key.lower())
        if value not in (None, "", "N/A"):
            return str(value)
    return ""


def parse_rocm_smi(data: Any) -> list[dict[str, str]]:
    """``rocm-smi --showproductname --showuniqueid --showdriverversion --json``.

    Shape: {"card0": {"Card Series": ..., "Unique ID": ...}, "system": {"Driver version": ...}}.
    """
    if not isinstance(data, dict):
        return []
    driver = _pick(data.get("system", {}) or {}, "Driver version")
    cards = sorted(
        (k for k in data if k.startswith("card")), key=lambda k: int(k[4:]) if k[4:].isdigit() else 0
    )
    return [
        {
            "name": _pick(data[c], "Card Series", "Card series", "Card SKU", "Device Name"),
            "uuid": _pick(data[c], "Unique ID"),
            "driver_version": driver,
        }
        for c in cards
        if isinstance(data[c], dict)
    ]


def parse_amd_smi(data: Any) -> list[dict[str, str]]:
    """``amd-smi static --json``: [{"gpu": i, "asic": {...}, "driver": {...}}] or {"gpu_data": [...]}."""
    items = data.get("gpu_data", []) if isinstance(data, dict) else data
    out: list[dict[str, str]] = []
    for item in items if isinstance(items, list) else []:
        asic = item.get("asic", {}) if isinstance(item, dict) else {}
        driver = item.get("driver", {}) if isinstance(item, dict) else {}
        out.append(
            {
                "name": _pick(asic, "market_name"),
                "uuid": _pick(asic, "asic_serial"),
                "driver_version": _pick(driver, "version"),
            }
        )
    return out


def smi_details() -> list[dict[str, str]]:
    """Names / ids / driver version per GPU from amd-smi (ROCm >= 6) or rocm-smi; [] when neither runs."""
    amd_smi = shutil.which("amd-smi")
    if amd_smi:
        details = parse_amd_smi(_run_json([amd_smi, "static", "--json"]))
        if details:
            return details
    rocm_smi = shutil.which("rocm-smi")
    if rocm_smi:
        argv = [rocm_smi, "--showproductname", "--showuniqueid", "--showdriverversion", "--json"]
        return parse_rocm_smi(_run_json(argv))
    return []


def discover(nodes: Path = KFD_NODES, details: list[dict[str, str]] | None = None) -> list[AmdDevice]:
    """Every AMD GPU of this host with what is known about it, in ROCR_VISIBLE_DEVICES order."""
    devices = kfd_devices(nodes)
    extra = smi_details() if details is None and devices else (details or [])
    version = rocm_version()
    out = []
    for device in devices:
        info = extra[device.index] if device.index < len(extra) else {}
        out.append(
            AmdDevice(
                index=device.index,
                arch=device.arch,
                compute_units=device.compute_units,
                uuid=info.get("uuid") or device.uuid,
                name=info.get("name", ""),
                driver_version=info.get("driver_version", ""),
                rocm_version=version,
            )
        )
    return out


def pinning_env(index: int) -> dict[str, str]:
    """Environment that shows one GPU to the ROCm runtime; set it before HIP initialises."""
    if index < 0:
        raise ValueError(f"device index must be >= 0, got {index}")
    return {"ROCR_VISIBLE_DEVICES": str(index)}
