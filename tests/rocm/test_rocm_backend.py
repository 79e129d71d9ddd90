"""ROCm backend with real hipcc (gfx906) compiles, and the harness run as a real subprocess.

Only the device is replaced: the harness imports the real hip-python, whose dlopen of libamdhip64.so
lands on tests/rocm/fake_device (no AMD GPU can exist here). Everything else is real: hip-python's
bindings, the compile cache, code objects, ISA analysis, the harness process, the watchdog, the JSON
protocol.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from kernels.formats.registry import FORMATS
from kernels.packages.expressions import as_int
from kernels.packages.loader import builtin_packages, load_folder
from kernels.packages.package import DeviceFacts
from tests.rocm.conftest import REPO, device_env
from workers.backends.base import TaskSpec
from workers.backends.registry import create_backend
from workers.backends.rocm import RocmBackend
from workers.harness.hip_runner import NAN_BITS
from workers.isa.analyze import analyze_file

DECODE = builtin_packages()["tb-decode"]

VARIANTS = ("MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP1")
SYMBOLS = ("tb_decode_mx4_kb1_rw1_u4_rg1_pg0_pp0", "tb_decode_mx4_kb4_rw2_u2_rg1_pg0_pp1")

pytestmark = pytest.mark.skipif(shutil.which("hipcc") is None, reason="Debian hipcc not installed")


@pytest.fixture(scope="module")
def rocm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rocm-artifacts")


@pytest.fixture
def fake_env(fake_device: Path, tmp_path: Path) -> Callable[..., dict[str, str]]:
    def env(**extra: str) -> dict[str, str]:
        return device_env(fake_device, tmp_path / "fake_hip.jsonl", **extra)

    return env


def decode_args(raw: bytes) -> dict[str, int]:
    """The launch buffer read back as the kernel's C signature reads it: the package's [[args]] for
    rocm in order, natural alignment (8-byte pointers, 4-byte ints)."""
    values: dict[str, int] = {}
    offset = 0
    for arg in DECODE.args_for("rocm"):
        pointer = arg.role in ("weights", "x", "y", "workspace")
        size = 8 if pointer else 4
        offset += -offset % size
        (value,) = struct.unpack_from("<Q" if pointer else "<i", raw, offset)
        values[arg.part or arg.name or arg.role] = value
        offset += size
    return values


def spec(**overrides: object) -> TaskSpec:
    base: dict[str, object] = dict(
        arch="gfx906", phase="decode", format="Q4_0", shape="T", n=256, k=512, m=2,
        variants=VARIANTS, min_dispatches=5, max_dispatches=5, warmup=2,
    )  # fmt: skip
    base.update(overrides)
    return TaskSpec(**base)  # type: ignore[arg-type]


def test_compile_is_cached_and_carries_isa_resources(rocm_cache: Path) -> None:
    variants = [DECODE.parse(name, "rocm") for name in VARIANTS]
    first = RocmBackend(rocm_cache).build(DECODE, "gfx906", "Q4_0", variants)
    assert first.artifact.ok and first.artifact.compiled
    assert "hipcc" in first.artifact.toolchain and "--offload-arch=gfx906" in first.artifact.flags
    for name in VARIANTS:
        build = first.variants[name]
        assert build.error is None and build.path is not None
        assert build.symbol == DECODE.symbol(DECODE.parse(name, "rocm"))
        report = {r["name"]: r for r in analyze_file(build.path)}[build.symbol]
        stored = first.artifact.resources[build.symbol]
        for key in ("vgpr", "sgpr", "lds_bytes", "scratch_bytes", "waves_per_simd", "limiter"):
            assert stored[key] == report[key]
        assert stored["arch"] == "gfx906" and isinstance(stored["vgpr"], int) and stored["vgpr"] > 0
    again = RocmBackend(rocm_cache).build(DECODE, "gfx906", "Q4_0", variants)
    assert not again.artifact.compiled and again.artifact.cache_key == first.artifact.cache_key
    assert again.artifact.resources == json.loads(json.dumps(first.artifact.resources))


def test_compile_error_stays_with_its_variant(tmp_path: Path) -> None:
    folder = tmp_path / "tb-decode"
    shutil.copytree(DECODE.root, folder)
    decode = folder / "decode.hip"
    text = decode.read_text()
    anchor = "__device__ TB_FORCEINLINE void tb_decode_body(TB_DECODE_PARAMS) {\n"
    assert anchor in text
    decode.write_text(text.replace(anchor, anchor + '    static_assert(KB != 4, "KB4 broken on purpose");\n'))
    package = load_folder(folder)
    names = ("MX4/KB4/RW1/U4/RG1/PG0/PP1", "MX4/KB1/RW2/U2/RG1/PG0/PP0")
    variants = [package.parse(name, "rocm") for name in names]
    built = RocmBackend(tmp_path / "cache").build(package, "gfx906", "Q4_0", variants)
    assert not built.artifact.ok
    broken, fine = built.variants[names[0]], built.variants[names[1]]
    assert broken.path is None and broken.error is not None and "KB4 broken on purpose" in broken.error
    assert fine.error is None and fine.path is not None
    assert set(built.artifact.resources) == {"tb_decode_mx4_kb1_rw2_u2_rg1_pg0_pp0"}


def test_registry_knows_rocm(tmp_path: Path) -> None:
    backend = create_backend("rocm", tmp_path)
    assert isinstance(backend, RocmBackend)
    assert backend.supports("gfx906", "decode", "Q4_0") is None
    assert backend.supports("gfx950", "prefill", "Q8_0") is None
    assert "sm_90" in str(backend.supports("sm_90", "decode", "Q8_0"))


def _fake_log(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "fake_hip.jsonl").read_text().splitlines()]


def test_harness_times_interleaved_with_parity(
    rocm_cache: Path, tmp_path: Path, fake_env: Callable[..., dict[str, str]]
) -> None:
    backend = RocmBackend(rocm_cache, env=fake_env(), profiler=None)
    device = backend.detect()
    assert device is not None and (device.arch, device.compute_units) == ("gfx906", 60)
    result = backend.run_task(spec())
    by_name = {r.variant: r for r in result.results}
    for name in VARIANTS:
        r = by_name[name]
        assert r.error is None, r.error
        assert r.parity is not None and r.parity.passed and r.parity.cosine > 0.9999
        assert len(r.dispatches) == 5
        assert all(d.event_ns == d.device_ns and d.wall_ns > 0 for d in r.dispatches)  # no profiler here
    seqs = sorted((d.seq, r.variant) for r in result.results for d in r.dispatches)
    assert [s for s, _ in seqs] == list(range(10))
    assert {v for _, v in seqs[:2]} == set(VARIANTS)  # round-robin, not one variant after the other
    # Q4_0 256x512 at its true bytes: 256 * 16 blocks * 18 = 73728 per copy; > 2 x 4 MiB L2 needs 114
    assert result.weight_copies == 114
    buffers = [d.buffer_index for r in result.results for d in r.dispatches]
    assert len(set(buffers)) == len(buffers)

    log = _fake_log(tmp_path)
    launches = [e for e in log if e["call"] == "launch"]
    assert len(launches) == 2 * (1 + 2 + 5)  # parity + warm-up + timed, per variant
    # every parity launch follows a NaN fill of the whole output
    for i, entry in enumerate(log):
        if entry["call"] == "launch" and i < 6 and log[i - 1]["call"] == "hipMemsetD32":
            assert log[i - 1]["value"] == NAN_BITS and log[i - 1]["count"] == 2 * 256
    assert sum(1 for e in log if e["call"] == "hipMemsetD32" and e["value"] == NAN_BITS) == 2
    for entry in launches:
        variant = DECODE.parse(VARIANTS[SYMBOLS.index(str(entry["symbol"]))], "rocm")
        values = DECODE.bindings(variant, 256, 512, 2, FORMATS["Q4_0"], DeviceFacts("rocm", "gfx906", 60, 64))
        geometry = DECODE.geometry(values)
        tiles, grid_x = as_int(values["tiles"]), as_int(values["grid_x"])
        assert entry["grid"] == list(geometry.grid) and entry["block"] == [256, 1, 1]
        args = decode_args(bytes.fromhex(str(entry["raw"])))
        assert (args["m"], args["n"], args["k"], args["tiles"], args["grid_x"]) == (
            2,
            256,
            512,
            tiles,
            grid_x,
        )
        assert (args["workspace"] != 0) == (variant.params["kb"] > 1) and args[
            "qh"
        ] == 0  # Q4_0: no high bits
        raw = bytes.fromhex(str(entry["raw"]))
        # 7 pointers, then m n k tiles grid_x as int32 at 56..72, padded to 80
        assert len(raw) == 80 and struct.unpack_from("<5i", raw, 56) == (2, 256, 512, tiles, grid_x)


def test_nan_fill_catches_a_partial_kernel(rocm_cache: Path, fake_env: Callable[..., dict[str, str]]) -> None:
    env = fake_env(FAKE_HIP_PARTIAL=SYMBOLS[1])
    result = RocmBackend(rocm_cache, env=env, profiler=None).run_task(spec())
    by_name = {r.variant: r for r in result.results}
    bad = by_name[VARIANTS[1]].parity
    assert bad is not None and not bad.passed
    good = by_name[VARIANTS[0]].parity
    assert good is not None and good.passed


def test_crash_marks_only_its_variant(rocm_cache: Path, fake_env: Callable[..., dict[str, str]]) -> None:
    env = fake_env(FAKE_HIP_CRASH=SYMBOLS[1])
    result = RocmBackend(rocm_cache, env=env, profiler=None).run_task(spec())
    by_name = {r.variant: r for r in result.results}
    crashed = by_name[VARIANTS[1]]
    assert crashed.error is not None
    assert f"crashed (exit status 139) during parity of {VARIANTS[1]}" in crashed.error
    assert crashed.dispatches == []
    survivor = by_name[VARIANTS[0]]
    assert survivor.error is None and len(survivor.dispatches) == 5


def test_hang_is_killed_by_the_watchdog(rocm_cache: Path, fake_env: Callable[..., dict[str, str]]) -> None:
    env = fake_env(FAKE_HIP_HANG=SYMBOLS[0])
    backend = RocmBackend(rocm_cache, env=env, profiler=None, watchdog_s=20)
    result = backend.run_task(spec())
    by_name = {r.variant: r for r in result.results}
    hung = by_name[VARIANTS[0]]
    assert hung.error is not None and f"hung (killed after 20 s) during parity of {VARIANTS[0]}" in hung.error
    assert by_name[VARIANTS[1]].error is None and len(by_name[VARIANTS[1]].dispatches) == 5


def test_no_device_means_the_task_fails(rocm_cache: Path, hip_python: str) -> None:
    # the real hip-python over the machine's real HIP runtime (Debian's libamdhip64), with no GPU
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    backend = RocmBackend(rocm_cache, env=env, profiler=None)
    assert backend.detect() is None
    with pytest.raises(RuntimeError, match="no ROCm device"):
        backend.run_task(spec())
