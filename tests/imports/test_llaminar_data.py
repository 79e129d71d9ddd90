"""Synthetic trainer CSVs shared by the import, table and nightly tests (helpers only, no tests here)."""

from __future__ import annotations

import hashlib

from service.imports.llaminar_csv import DECODE_HEADER, PREFILL_HEADER

SHAPES = {
    "Qwen36_FFN_GateUp": (17408, 5120),
    "Qwen36_FFN_DownProjection": (5120, 17408),
    "Qwen36_GDN_ZProjection": (6144, 5120),
    "Qwen36_GDN_TimeProjection": (1024, 5120),
    "35BMoE_Expert_GateUp": (512, 2048),
    "Qwen36MoE_GDN_QKVProjection": (8192, 2048),
}
PREFILL_VARIANTS = ["N64/MT16/MB1/U2", "N64/MT32/MB1/U4", "N128/MT32/MB1/U2", "N128/MT16/MB2/U4"]
DECODE_VARIANTS = ["KB1/TW4", "KB2/TW8", "KB4/TW8", "KB8/TW8"]


def fake_us(*key: object, salt: str = "") -> float:
    digest = hashlib.sha256(("/".join(map(str, key)) + salt).encode()).digest()
    return 0.75 + 0.5 * digest[0] / 255.0


def prefill_csv(
    formats: tuple[str, ...] = ("Q4_1", "Q4_K", "Q8_0"), ms: tuple[int, ...] = (64, 600), salt: str = ""
) -> str:
    from kernels.formats.registry import FORMATS

    lines = [",".join(PREFILL_HEADER)]
    for fmt in formats:
        for m in ms:
            for shape, (n, k) in SHAPES.items():
                times = {v: (m * n * k / 2e7) * fake_us(fmt, m, n, k, v, salt=salt) for v in PREFILL_VARIANTS}
                best = min(times, key=times.__getitem__)
                for v, t in times.items():
                    lines.append(
                        f"rocm,prefill,{fmt},{FORMATS[fmt].codebook},{shape},ffn,{m},{n},{k},{v},"
                        f"{t:.3f},{t * 1.05:.3f},{t * 0.02:.3f},{2 * m * n * k / t / 1e3:.1f},"
                        f"0.9999,1,{int(v == best)}"
                    )
    return "\n".join(lines) + "\n"


def decode_csv(
    formats: tuple[str, ...] = ("Q4_0", "Q8_0"), ms: tuple[int, ...] = (1, 2), salt: str = ""
) -> str:
    from kernels.formats.registry import FORMATS

    lines = [",".join(DECODE_HEADER)]
    for fmt in formats:
        for m in ms:
            for shape, (n, k) in SHAPES.items():
                times = {
                    v: (n * k / 4e5 + 3 * m) * fake_us(fmt, m, n, k, v, salt=salt) for v in DECODE_VARIANTS
                }
                best = min(times, key=times.__getitem__)
                for v, t in times.items():
                    kb, tw = v[2:].split("/TW")
                    wb = n * k // 2
                    lines.append(
                        f"rocm,decode,{fmt},{FORMATS[fmt].codebook},{shape},{m},{n},{k},{v},{kb},{tw},{wb},"
                        f"{t:.3f},{t * 1.04:.3f},{t * 0.01:.3f},{wb / t / 1e3:.1f},"
                        f"0.7,2.1,3.5,0.6,0.99998,1,{int(v == best)}"
                    )
    return "\n".join(lines) + "\n"
