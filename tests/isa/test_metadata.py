"""Metadata read through pyelftools + msgpack equals what llvm-readelf-15 --notes prints."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.isa.bundle import NotACodeObject, code_objects, parse_bundle
from workers.isa.metadata import read_metadata

ARCHS = ("gfx906", "gfx90a", "gfx942", "gfx950")
FIELDS = (
    "vgpr_count",
    "agpr_count",
    "sgpr_count",
    "group_segment_fixed_size",
    "private_segment_fixed_size",
    "vgpr_spill_count",
    "sgpr_spill_count",
    "wavefront_size",
    "max_flat_workgroup_size",
)


def readelf_kernels(path: Path) -> tuple[str, dict[str, dict[str, str]]]:
    """Parse llvm-readelf's YAML-ish note dump: (amdhsa.target, {kernel name: {key: value}})."""
    exe = shutil.which("llvm-readelf-15")
    if exe is None:
        pytest.skip("llvm-readelf-15 not installed (Debian package llvm-15)")
    proc = subprocess.run([exe, "--notes", str(path)], capture_output=True, text=True, timeout=60, check=True)
    kernels: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    target = ""
    for line in proc.stdout.splitlines():
        item = re.match(r"^  - \.(\w+):\s*(\S*)", line)  # first key of a kernel map
        field = re.match(r"^    \.(\w+):\s*(\S+)", line)  # later top-level keys of that kernel
        if item:
            current = {item.group(1): item.group(2)}
            kernels[f"#{len(kernels)}"] = current
        elif field:
            current[field.group(1)] = field.group(2)
        elif line.startswith("amdhsa.target:"):
            target = line.split(":", 1)[1].strip()
    return target, {k["name"]: k for k in kernels.values()}


def device_elf(path: Path, out: Path) -> Path:
    """The device ELF as a file: clang-offload-bundler-15 unbundles independently of us."""
    data = path.read_bytes()
    if not data.startswith(b"__CLANG_OFFLOAD_BUNDLE__"):
        return path
    bundler = "/usr/lib/llvm-15/bin/clang-offload-bundler"
    ids = [i for i, _ in parse_bundle(data) if "amdgcn" in i]
    argv = [bundler, "--unbundle", "--type=o", f"--targets={ids[0]}", f"--input={path}", f"--output={out}"]
    subprocess.run(argv, check=True, timeout=60, capture_output=True)
    return out


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stem", ["dot4_loop", "spill"])
def test_metadata_equals_readelf(
    code_object: Callable[[str, str], Path], tmp_path: Path, stem: str, arch: str
) -> None:
    path = code_object(stem, arch)
    elf_path = device_elf(path, tmp_path / "device.co")
    objects = code_objects(path.read_bytes())
    assert len(objects) == 1
    assert objects[0].data == elf_path.read_bytes()  # our unbundler == clang-offload-bundler
    meta = read_metadata(objects[0].data)
    target, expected = readelf_kernels(elf_path)
    assert meta.arch == arch
    assert meta.target == target
    assert sorted(k.name for k in meta.kernels) == sorted(expected)
    for kernel in meta.kernels:
        want = expected[kernel.name]
        assert kernel.symbol == want["symbol"]
        for name in FIELDS:
            # LLVM 15 omits .agpr_count on gfx906 (no AGPRs there): absent means 0
            value = want.get(name, "0") if name == "agpr_count" else want[name]
            assert getattr(kernel, name) == int(value), (kernel.name, name)


def test_spill_kernel_reports_spills(code_object: Callable[[str, str], Path]) -> None:
    for arch in ARCHS:
        meta = read_metadata(code_objects(code_object("spill", arch).read_bytes())[0].data)
        (kernel,) = meta.kernels
        assert kernel.vgpr_spill_count > 0 and kernel.private_segment_fixed_size > 0, arch


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"hello world, not a code object",
        b"\x7fELF\x02\x01\x01" + b"\0" * 60,
        b"__CLANG_OFFLOAD_BUNDLE__\x05",
    ],
)
def test_not_a_code_object(blob: bytes) -> None:
    with pytest.raises(NotACodeObject):
        code_objects(blob)
        # a truncated bundle may parse no entries; reading metadata must still refuse
        read_metadata(blob)


def test_host_elf_refused() -> None:
    with pytest.raises(NotACodeObject, match="not an AMDGPU"):
        code_objects(Path("/bin/sh").resolve().read_bytes())
