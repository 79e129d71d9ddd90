"""SASS instruction counts of one tb-decode ring step, from the device's own compiler (NVRTC), no GPU.

    python bench/sass_decode_step.py --nvdisasm PATH --formats IQ4_XS,IQ4_NL,Q4_0 \
        --variants MX1/KB1/RW2/U2/RG1/PG3/PP2,MX4/KB1/RW2/U8/RG16/PG2/PP2

Why: a decode kernel that stays under copy bandwidth with enough bytes in flight is issue-bound; the count of
instructions in its steady-state loop says what a format's unpack costs (issue 13: IQ4_XS at 43 % of copy
bandwidth where Q4_0 streams). The window counted is the cp.async ring's (PP >= 2) loop: from the first
``DEPBAR.LE`` (the wait of a step) to the next one (dp4a: one step = RW x U chunks of 32 weights per lane,
with the step's issue and the end-of-tile code); RG16 variants have one wait in the loop, so their window
ends at the last ``DEPBAR.LE`` (the drain after the loop). nvdisasm is not in the venv: pass the binary
of the ``nvidia-cuda-nvdisasm`` wheel or a CUDA toolkit. Prints JSON: per (format, variant) the window's
length, its opcode counts (``MOVUR``: a register loaded from a uniform register) and the registers.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")
_FUNC = re.compile(r"\.text\.(\S+):")


def functions(sass: str) -> dict[str, list[tuple[str, str]]]:
    """Per function name, its (opcode, operands) in order."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in sass.splitlines():
        if match := _FUNC.search(line):
            current = out.setdefault(match.group(1), [])
        elif current is not None and (match := _INSTR.search(line)):
            current.append((match.group(2), match.group(3)))
    return out


def step_counts(instrs: list[tuple[str, str]], tensor_cores: bool) -> dict[str, int]:
    """Opcode counts (first dotted part) between the first DEPBAR.LE and the next (or the last, RG16)."""
    waits = [i for i, (op, _) in enumerate(instrs) if op.startswith("DEPBAR.LE")]
    if len(waits) < 2:
        raise ValueError("no ring loop (not a PP >= 2 variant?)")
    window = instrs[waits[0] : waits[-1] if tensor_cores else waits[1]]
    counts: Counter[str] = Counter()
    for op, args in window:
        counts["MOVUR" if op.startswith("IMAD") and "RZ, RZ, UR" in args else op.split(".")[0]] += 1
    return {"total": len(window), **dict(counts.most_common())}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nvdisasm", required=True, type=Path)
    parser.add_argument("--formats", required=True)
    parser.add_argument("--variants", required=True, help="comma list of ring (PP >= 2) variant names")
    args = parser.parse_args()

    from kernels.packages.loader import builtin_packages
    from workers.backends import cuda
    from workers.harness.nvrtc_census import PTXAS_VERBOSE, parse_ptxas_report

    package = builtin_packages()["tb-decode"]
    names = [n for n in args.variants.split(",") if n]
    result: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="sass-step-") as tmp:
        backend = cuda.CudaBackend(Path(tmp), options=(*cuda.BASE_OPTIONS, PTXAS_VERBOSE))
        for fmt in [f for f in args.formats.split(",") if f]:
            variants = [package.parse(n, "cuda") for n in names]
            for unit, compiled in backend.compile(package, fmt, variants):
                if not compiled.ok:
                    raise SystemExit(f"{fmt}: NVRTC failed:\n{compiled.log[-2000:]}")
                proc = subprocess.run(
                    [str(args.nvdisasm), "-c", compiled.path],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                funcs = functions(proc.stdout)
                report = parse_ptxas_report(compiled.log)
                for name, expression in unit.symbols(package).items():
                    lowered = compiled.symbols.get(expression, expression)
                    result[f"{fmt} {name}"] = {
                        "registers": report[lowered].registers,
                        "step": step_counts(funcs[lowered], "/RG16/" in name),
                    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
