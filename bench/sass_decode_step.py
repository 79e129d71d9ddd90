"""SASS instruction counts of one tb-decode ring step, from the device's own compiler (NVRTC), no GPU.

    python bench/sass_decode_step.py --nvdisasm PATH --formats IQ4_XS,IQ4_NL,Q4_0 \
        --variants MX1/KB1/RW2/U2/RG1/PG3/PP2,MX4/KB1/RW2/U8/RG16/PG2/PP2

Why: a decode kernel that stays under copy bandwidth with enough bytes in flight is issue-bound; the count of
instructions in its steady-state loop says what a format's unpack costs (issue 13: IQ4_XS at 43 % of copy
bandwidth where Q4_0 streams). The window counted is the cp.async ring's (PP >= 2) loop: from the first
``DEPBAR.LE`` (the wait of a step) to the next one (dp4a: one step = RW x U chunks of 32 weights per lane,
with the step's issue and the end-of-tile code). RG16 variants: the hot path of one ring stage, i.e. the
inner loop over a row tile's stages (from the target of its backward branch to the branch: the stage's
cp.async issue, wait, ldmatrix, unpack, mma and scaling) less the blocks a warp runs once per row tile (the
copy pointers' re-aim after ``LDGDEPBAR``) or only in a matrix's last row tile (the scale copy that
zero-fills past the end of sc); ``stage_loop`` and ``stage_cold`` give those two sizes. nvdisasm is not in
the venv: pass the binary of the ``nvidia-cuda-nvdisasm`` wheel or a CUDA toolkit. Prints JSON: per
(format, variant) the window's length, its opcode counts (``MOVUR``: a register loaded from a uniform
register) and the registers.
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
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"\((\.L_x_\d+)\)")


def functions(sass: str) -> dict[str, list[tuple[str, str]]]:
    """Per function name, its (opcode, operands) in order."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in sass.splitlines():
        if match := _FUNC.search(line):
            current = out.setdefault(match.group(1), [])
        elif current is not None and (match := _LABEL.match(line)):
            current.append(("LABEL", match.group(1)))
        elif current is not None and (match := _INSTR.search(line)):
            current.append((match.group(2), match.group(3)))
    return out


def _count(window: list[tuple[str, str]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for op, args in window:
        if op != "LABEL":
            counts["MOVUR" if op.startswith("IMAD") and "RZ, RZ, UR" in args else op.split(".")[0]] += 1
    return {"total": sum(counts.values()), **dict(counts.most_common())}


def _skipped(body: list[tuple[str, str]], branch: int) -> tuple[int, int]:
    """(index of the label a forward branch at ``branch`` jumps to, instructions skipped); (-1, 0): none."""
    match = _TARGET.search(body[branch][1])
    if not match:
        return -1, 0
    end = next((k for k, (op, a) in enumerate(body) if op == "LABEL" and a == match.group(1)), -1)
    if end < branch:
        return -1, 0
    return end, sum(1 for op, _ in body[branch + 1 : end] if op != "LABEL")


def rg16_stage(instrs: list[tuple[str, str]]) -> dict[str, int]:
    """Opcode counts of an RG16 kernel's hot path per ring stage (module docstring)."""
    labels = {a: i for i, (op, a) in enumerate(instrs) if op == "LABEL"}
    body: list[tuple[str, str]] = []
    for i, (op, args) in enumerate(instrs):
        target = _TARGET.search(args) if op.startswith("BRA") else None
        if target and labels.get(target.group(1), i) < i:
            body = instrs[labels[target.group(1)] : i + 1]
            if any(o.startswith("IMMA") for o, _ in body):
                break
    else:
        raise ValueError("no loop with an IMMA")
    drop = [False] * len(body)
    # the re-aim: the block a branch right after LDGDEPBAR skips
    dep = next(j for j, (op, _) in enumerate(body) if op == "LDGDEPBAR")
    for j in range(dep, min(dep + 6, len(body))):
        if body[j][0].startswith("BRA"):
            end, _ = _skipped(body, j)
            for k in range(j + 1, max(end, j + 1)):
                drop[k] = True
            break
    warm = sum(1 for j, (op, _) in enumerate(body) if drop[j] and op != "LABEL")
    # the zero-filling scale copy: from a branch target with no other label before its ZFILL copy
    cold = 0
    for j, (op, args) in enumerate(body):
        target = _TARGET.search(args) if op.startswith("BRA") else None
        name = target.group(1) if target else None
        start = next((k for k, (o, a) in enumerate(body) if o == "LABEL" and a == name), -1)
        if start <= j:
            continue
        zfill = next((k for k in range(start, len(body)) if "ZFILL" in body[k][0]), -1)
        if zfill > start and not any(o == "LABEL" for o, _ in body[start + 1 : zfill]):
            for k in range(start, zfill + 1):
                drop[k] = True
            cold = sum(1 for o, _ in body[start : zfill + 1] if o != "LABEL")
            break
    hot = [ins for j, ins in enumerate(body) if not drop[j]]
    return {**_count(hot), "stage_loop": _count(body)["total"], "stage_cold": warm + cold}


def step_counts(instrs: list[tuple[str, str]], tensor_cores: bool) -> dict[str, int]:
    """Opcode counts (first dotted part): dp4a rings from the first DEPBAR.LE to the next; RG16 rg16_stage."""
    if tensor_cores:
        return rg16_stage(instrs)
    waits = [i for i, (op, _) in enumerate(instrs) if op.startswith("DEPBAR.LE")]
    if len(waits) < 2:
        raise ValueError("no ring loop (not a PP >= 2 variant?)")
    return _count(instrs[waits[0] : waits[1]])


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
