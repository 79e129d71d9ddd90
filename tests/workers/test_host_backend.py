"""Host backend end to end: real cc builds, real C kernels, real parity and timing."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import quants

from kernels.activations import int8_gemm, quantize_activations
from kernels.formats.packing import FIRST_WAVE
from kernels.formats.split import split_blocks
from kernels.packages.loader import INCLUDE_DIR, builtin_packages
from kernels.reference import build_problem
from workers.backends.base import TaskSpec
from workers.backends.host import HostBackend, llc_bytes
from workers.harness.interleave import interleave
from workers.runner import weight_copies

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]
HOST_VARIANTS = tuple(v.name for v in DECODE.space("host"))
DECODE_FORMATS = tuple(DECODE.manifest.formats)  # the nine first-wave formats, Q5_1 included
PREFILL_VARIANTS = tuple(v.name for v in PREFILL.space("host"))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def backend(artifacts: Path) -> HostBackend:
    return HostBackend(artifacts)


def spec(fmt: str, n: int, k: int, m: int, **kw: object) -> TaskSpec:
    phase = str(kw.pop("phase", "decode"))
    variants = HOST_VARIANTS if phase == "decode" else PREFILL_VARIANTS
    args: dict[str, object] = {"arch": "host", "variants": variants, "min_dispatches": 3, "warmup": 1}
    args.update(kw)
    return TaskSpec(phase=phase, format=fmt, shape="test", n=n, k=k, m=m, **args)  # type: ignore[arg-type]


def patched_package(tmp_path: Path, old: str, new: str, phase: str = "decode") -> Path:
    """A private copy of a built-in package with one edit in its host source: the folder a task names."""
    package = DECODE if phase == "decode" else PREFILL
    folder = tmp_path / f"pkg-{phase}"
    shutil.copytree(package.root, folder)
    source = folder / package.manifest.sources["host"][0]
    text = source.read_text()
    assert old in text
    source.write_text(text.replace(old, new))
    return folder


def test_detect_and_supports(backend: HostBackend) -> None:
    dev = backend.detect()
    assert dev is not None
    assert (dev.backend, dev.arch) == ("host", "host")
    assert dev.compute_units >= 1 and len(dev.uuid) == 32 and dev.name
    assert dev.runtime_version and dev == backend.detect()
    for fmt in FIRST_WAVE:
        assert backend.supports("host", "decode", fmt) is None
        assert backend.supports("host", "prefill", fmt) is None
    assert "gfx906" in (backend.supports("gfx906", "decode", "Q8_0") or "")
    with pytest.raises(ValueError, match="gfx906"):
        backend.run_task(spec("Q8_0", 8, 32, 1, arch="gfx906"))


def _host_output(
    backend: HostBackend, phase: str, fmt: str, variant: str, n: int, k: int, m: int
) -> np.ndarray:
    """Run one host kernel directly and return its output (for comparison with the int8 model)."""
    package = DECODE if phase == "decode" else PREFILL
    compiled = backend.build(package, fmt, [package.parse(variant, "host")])
    kernel = compiled.kernels[variant]
    p = build_problem(fmt, n, k, m, seed=5, packed=package.manifest.weights == "tb-packed")
    y = np.full((m, n), np.nan, dtype=np.float32)
    if package.manifest.weights == "tb-split":  # true bytes; model = gguf dequantisation x int8 activations
        parts = split_blocks(p.format, p.weights)
        ptr = {name: 0 if a is None else a.ctypes.data for name, a in parts.items()}
        kernel.call(ptr["qs"], ptr["qh"], ptr["sc"], p.x.ctypes.data, y.ctypes.data, m, n, k)
        qa = quantize_activations(p.x)
        xr = qa.xq.astype(np.float64).reshape(m, -1, 32) * qa.xs.astype(np.float64)[:, :, None]
        w = quants.dequantize(p.weights, p.format.ggml_type).astype(np.float64)
        model = (xr.reshape(m, k) @ w.T).astype(np.float32)
        np.testing.assert_allclose(y, model, rtol=1e-4, atol=1e-4 * float(np.abs(model).max()))
        return y
    assert p.packed is not None
    mins = p.packed.mins.ctypes.data if p.packed.mins is not None else 0
    kernel.call(
        p.packed.qs.ctypes.data, p.packed.scales.ctypes.data, mins, p.x.ctypes.data, y.ctypes.data, m, n, k
    )
    model = int8_gemm(p.packed, quantize_activations(p.x))
    np.testing.assert_allclose(y, model, rtol=2e-5, atol=2e-5 * float(np.abs(model).max()))
    return y


@pytest.mark.parametrize("fmt", DECODE_FORMATS)
@pytest.mark.parametrize(("phase", "n", "k", "m"), [("decode", 67, 512, 3), ("prefill", 70, 512, 37)])
def test_every_format_and_variant_passes_parity(
    backend: HostBackend, fmt: str, phase: str, n: int, k: int, m: int
) -> None:
    if phase == "prefill" and fmt not in FIRST_WAVE:
        pytest.skip(f"tb-prefill reads tb-packed, which has no {fmt}")
    result = backend.run_task(spec(fmt, n, k, m, phase=phase, min_dispatches=1, warmup=0))
    names = HOST_VARIANTS if phase == "decode" else PREFILL_VARIANTS
    assert [r.variant for r in result.results] == list(names)
    for r in result.results:
        assert r.error is None, r.error
        assert r.parity is not None and r.parity.passed, (r.variant, r.parity)
        assert r.parity.rel_l2 < 1e-2 and r.parity.sampled_rows is None
        assert r.symbol.startswith(f"tb_{phase}_")
    # the C kernels compute exactly the integer model (kernels.activations.int8_gemm)
    _host_output(backend, phase, fmt, names[-1], n, k, m)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize(
    ("n", "k", "m"),
    [(64, 256, 1), (64, 256, 2), (64, 256, 4), (13, 96, 2), (9, 32, 5)],
)
def test_decode_shapes_and_tails(backend: HostBackend, fmt: str, n: int, k: int, m: int) -> None:
    result = backend.run_task(spec(fmt, n, k, m, min_dispatches=1, warmup=0))
    for r in result.results:
        assert r.error is None and r.parity is not None and r.parity.passed, (r.variant, r.parity)
        p = DECODE.parse(r.variant, "host").params
        assert r.symbol == "tb_decode_mx{mx}_kb{kb}_rw{rw}_u{u}_rg{rg}_pg{pg}_pp{pp}".format(**p)


@pytest.mark.parametrize(("n", "k", "m"), [(129, 96, 33), (5, 32, 1), (64, 256, 16)])
def test_prefill_shapes_and_tails(backend: HostBackend, n: int, k: int, m: int) -> None:
    result = backend.run_task(spec("Q4_1", n, k, m, phase="prefill", min_dispatches=1, warmup=0))
    for r in result.results:
        assert r.error is None and r.parity is not None and r.parity.passed, (r.variant, r.parity)


def test_cache_hit_compiles_nothing(artifacts: Path) -> None:
    first = HostBackend(artifacts).run_task(spec("Q8_0", 16, 64, 1))
    second = HostBackend(artifacts).run_task(spec("Q8_0", 16, 64, 1))
    assert first.artifact.ok and second.artifact.ok and not second.artifact.compiled
    assert second.artifact.cache_key == first.artifact.cache_key
    assert second.artifact.path == first.artifact.path
    space = DECODE.space("host")
    other_flags = HostBackend(artifacts, flags=("-O2", "-std=c11", "-fPIC", "-shared")).build(
        DECODE, "Q8_0", space
    )
    assert other_flags.artifact.compiled and other_flags.artifact.cache_key != first.artifact.cache_key
    # one library per format (tb-split: each format its own unit), even formats alike in shape
    keys = {HostBackend(artifacts).build(DECODE, f, space).artifact.cache_key for f in ("Q4_0", "IQ4_NL")}
    assert len(keys) == 2 and first.artifact.cache_key not in keys
    prefill = HostBackend(artifacts).build(PREFILL, "Q8_0", PREFILL.space("host"))
    assert prefill.artifact.cache_key != first.artifact.cache_key


def test_header_edit_invalidates_the_cache(tmp_path: Path) -> None:
    # a package that carries its own copy of tb_host.h: the version (and so the key) covers every file
    folder = patched_package(tmp_path, "#include", "#include")
    shutil.copy(INCLUDE_DIR / "tb_host.h", folder / "tb_host.h")
    from kernels.packages.loader import load_folder

    before = load_folder(folder)
    (folder / "tb_host.h").write_text((INCLUDE_DIR / "tb_host.h").read_text() + "\n/* edit */\n")
    after = load_folder(folder)
    backend = HostBackend(tmp_path / "art")
    one = [before.parse(HOST_VARIANTS[0], "host")]
    a, b = backend.build(before, "Q8_0", one), backend.build(after, "Q8_0", one)
    assert a.artifact.ok and b.artifact.ok and b.artifact.compiled
    assert b.artifact.source_hash != a.artifact.source_hash and b.artifact.cache_key != a.artifact.cache_key


def test_compile_failure_is_per_variant_not_an_exception(tmp_path: Path) -> None:
    broken = patched_package(
        tmp_path, "TB_DECODE_VARIANTS\n\n#undef", "TB_DECODE_VARIANTS\nthis is not C;\n\n#undef"
    )
    result = HostBackend(tmp_path / "art").run_task(spec("Q4_0", 16, 64, 1, kernel_root=str(broken)))
    assert not result.artifact.ok and "error" in result.artifact.log
    assert len(result.results) == len(HOST_VARIANTS)
    for r in result.results:
        assert r.error is not None and r.error.startswith("compile failed")
        assert r.dispatches == [] and r.parity is None


def test_kernel_that_drops_a_k_block_fails_parity_but_is_timed(tmp_path: Path) -> None:
    src = patched_package(  # the last 16-byte chunk of every row (32 weights; 16 for Q8_0) is skipped
        tmp_path,
        "const int pl = tb_chunk_p_lo(c)",
        "if (c == nblk * TB_CHUNKS_PER_BLOCK - 1) continue;\n const int pl = tb_chunk_p_lo(c)",
    )
    backend = HostBackend(tmp_path / "art")
    result = backend.run_task(spec("Q8_0", 24, 512, 2, kernel_root=str(src)))
    for r in result.results:
        assert r.parity is not None and not r.parity.passed and r.parity.rel_l2 > 2e-2
        assert r.error is None and len(r.dispatches) == 3
    # the same at a realistic K: one block of 17408 / 32 = 544 is still caught by the int8 bounds
    big = backend.run_task(
        spec(
            "Q4_K",
            8,
            17408,
            1,
            variants=("MX4/KB4/RW1/U4/RG1/PG0/PP0",),
            min_dispatches=1,
            kernel_root=str(src),
        )
    )
    assert big.results[0].parity is not None and not big.results[0].parity.passed


def test_prefill_kernel_that_drops_a_k_block_fails(tmp_path: Path) -> None:
    src = patched_package(
        tmp_path, "for (int c = 0; c < chunks; ++c) {", "for (int c = 0; c < chunks - 1; ++c) {", "prefill"
    )
    result = HostBackend(tmp_path / "art").run_task(
        spec("IQ4_XS", 40, 512, 20, phase="prefill", kernel_root=str(src))
    )
    for r in result.results:
        assert r.parity is not None and not r.parity.passed and r.error is None


def test_kernel_that_skips_an_output_row_fails_via_nan_fill(tmp_path: Path) -> None:
    store = "y[(size_t)i * (size_t)n + (size_t)(r0 + r)] = total[r];"
    src = patched_package(tmp_path, store, "if (r0 + r != n - 1) " + store)
    result = HostBackend(tmp_path / "art").run_task(spec("Q4_0", 20, 64, 1, kernel_root=str(src)))
    for r in result.results:
        assert r.parity is not None and not r.parity.passed and np.isnan(r.parity.cosine)


def test_invalid_variant_is_reported_and_others_run(backend: HostBackend) -> None:
    gpu_only, ok = "MX4/KB1/RW1/U4/RG1/PG0/PP1", "MX4/KB4/RW2/U2/RG1/PG0/PP0"
    result = backend.run_task(spec("Q8_0", 16, 64, 1, variants=(gpu_only, ok, "bogus")))
    by_name = {r.variant: r for r in result.results}
    assert "breaks restriction(s) for host" in (by_name[gpu_only].error or "")
    assert by_name["bogus"].error is not None and by_name["bogus"].dispatches == []
    assert by_name[ok].error is None and len(by_name[ok].dispatches) == 3


def test_dispatches_are_interleaved_and_rotate_buffers(backend: HostBackend) -> None:
    calls: list[tuple[int, int]] = []
    variants = HOST_VARIANTS[:3]
    result = backend.run_task(
        spec("Q4_0", 32, 128, 2, variants=variants, min_dispatches=7, warmup=2),
        progress=lambda done, planned: calls.append((done, planned)),
    )
    assert result.weight_copies > 1
    seqs = sorted(d.seq for r in result.results for d in r.dispatches)
    assert seqs == list(range(7 * len(variants)))
    for r in result.results:
        assert len(r.dispatches) == 7
        # one dispatch of every variant per round: the i-th dispatch lies in round i
        assert [d.seq // len(variants) for d in r.dispatches] == list(range(7))
        assert all(d.device_ns > 0 and d.wall_ns >= d.device_ns for d in r.dispatches)
        assert len({d.buffer_index for d in r.dispatches}) > 1
        assert all(0 <= d.buffer_index < result.weight_copies for d in r.dispatches)
    assert calls[0] == (0, 21) and calls[-1] == (21, 21) and len(calls) == 8


def test_warm_cache_uses_one_copy(backend: HostBackend) -> None:
    result = backend.run_task(spec("Q8_0", 16, 64, 1, warm_cache=True))
    assert result.weight_copies == 1
    assert {d.buffer_index for r in result.results for d in r.dispatches} == {0}


def test_weight_copy_policy() -> None:
    """One policy for every backend (workers/runner.py): > 2x the LLC, at most 256 copies and 8 GiB."""
    assert llc_bytes() >= 0
    assert weight_copies(1 << 20, 32 << 20, warm_cache=False) == 65  # 65 MiB > 2 x 32 MiB
    assert weight_copies(1 << 16, 32 << 20, warm_cache=False) == 256  # wants 1025: capped
    assert weight_copies(8 << 20, 32 << 20, warm_cache=False) == 9  # 72 MiB > 2 x LLC
    assert weight_copies(5 << 30, 32 << 20, warm_cache=False) == 1  # 8 GiB memory cap
    assert weight_copies(1 << 20, 32 << 20, warm_cache=True) == 1


def test_interleave_scheduler_directly() -> None:
    order: list[str] = []

    def make(name: str) -> object:
        def fn(buffer_index: int) -> int:
            order.append(name)
            return 5

        return fn

    def broken(buffer_index: int) -> int:
        raise RuntimeError("boom")

    out = interleave(
        [("a", make("a")), ("b", make("b")), ("c", make("c")), ("x", broken)],  # type: ignore[list-item]
        rounds=2,
        warmup=1,
        buffers=2,
    )
    # warm-up round a b c (x fails there), then timed rounds starting at a rotating variant
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert "boom" in out.errors["x"] and out.dispatches["x"] == []
    assert [d.seq for d in out.dispatches["b"]] == [0, 5]
    timed = sorted((d for rows in out.dispatches.values() for d in rows), key=lambda d: d.seq)
    # the copy advances on every dispatch (warm-up and failed ones included): b c a c a b -> 0 1 0 1 0 1
    assert [d.buffer_index for d in timed] == [0, 1, 0, 1, 0, 1]
