"""AMD discovery from a KFD topology tree in the sysfs format (written here; no AMD GPU on this host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.devices.amd import discover, kfd_devices, parse_amd_smi, parse_rocm_smi, pinning_env


def node(root: Path, index: int, **props: int) -> None:
    folder = root / str(index)
    folder.mkdir(parents=True)
    (folder / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))


def test_kfd_topology(tmp_path: Path) -> None:
    node(tmp_path, 0, cpu_cores_count=16, simd_count=0, gfx_target_version=0)  # the CPU
    node(
        tmp_path,
        1,
        simd_count=240,
        simd_per_cu=4,
        gfx_target_version=90006,
        unique_id=0x1234ABCD,
        location_id=768,
    )
    node(tmp_path, 2, simd_count=1216, simd_per_cu=4, gfx_target_version=90402, unique_id=0, location_id=1024)
    devices = kfd_devices(tmp_path)
    assert [(d.index, d.arch, d.compute_units) for d in devices] == [(0, "gfx906", 60), (1, "gfx942", 304)]
    assert devices[0].uuid == "GPU-000000001234abcd" and devices[1].uuid == "kfd-node2-loc1024"
    smi = [{"name": "AMD Instinct MI50", "uuid": "0x1234abcd", "driver_version": "6.7.0"}]
    merged = discover(tmp_path, smi)
    assert merged[0].name == "AMD Instinct MI50" and merged[0].uuid == "0x1234abcd"
    assert merged[1].name == "" and merged[1].uuid == "kfd-node2-loc1024"
    assert kfd_devices(tmp_path / "absent") == []


def test_smi_json_shapes() -> None:
    rocm = {
        "card1": {"Card Series": "MI60", "Unique ID": "0xbb"},
        "card0": {"Card Series": "MI50", "Unique ID": "0xaa"},
        "system": {"Driver version": "6.2.4"},
    }
    assert parse_rocm_smi(rocm) == [
        {"name": "MI50", "uuid": "0xaa", "driver_version": "6.2.4"},
        {"name": "MI60", "uuid": "0xbb", "driver_version": "6.2.4"},
    ]
    amd = [
        {
            "gpu": 0,
            "asic": {"market_name": "AMD Instinct MI355X", "asic_serial": "0x5F"},
            "driver": {"version": "6.12"},
        }
    ]
    assert parse_amd_smi(amd) == [{"name": "AMD Instinct MI355X", "uuid": "0x5F", "driver_version": "6.12"}]
    assert parse_amd_smi({"gpu_data": amd}) == parse_amd_smi(amd)
    assert parse_rocm_smi(None) == [] and parse_amd_smi("junk") == []


def test_pinning() -> None:
    assert pinning_env(3) == {"ROCR_VISIBLE_DEVICES": "3"}
    with pytest.raises(ValueError):
        pinning_env(-1)
