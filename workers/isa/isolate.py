"""Disassembly that cannot take its caller down: LLVM runs in a child process with a timeout.

LLVM's C disassembler calls ``report_fatal_error`` (exit) or aborts on a CPU it does not support
("disassembly not yet supported for subtarget"), and a damaged kernel could crash the decoder. In the
CLI, an API request or a worker that would end the whole process, so the LLVM 22 engine runs in
``python -m workers.isa.isolate`` (code object on stdin, JSON on stdout). A child that dies or times out
becomes an error string; when a code object holds several kernels, each is then retried alone so one
bad kernel costs only its own disassembly. ``llvm-objdump`` is already a child process of its own.

The same result type serves both engines: :class:`Disassembly` with the functions that were read, the
engine used, and per-kernel errors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workers.isa.disasm import (
    DisassemblyUnavailable,
    Function,
    Instruction,
    disassemble,
    disassemble_llvm,
    engine_for,
    function_symbols,
)
from workers.isa.metadata import KNOWN_ARCHS

ROOT = Path(__file__).resolve().parents[2]  # the folder holding the workers package, for the child's path
CHILD_TIMEOUT_S = 180  # a 20k-instruction GEMM disassembles in well under a second; this is a hang guard
MAX_ERROR_CHARS = 600


@dataclass
class Disassembly:
    """What could be read: functions by symbol name, the engine, and why anything is missing."""

    functions: dict[str, Function] = field(default_factory=dict)
    engine: str = ""
    error: str | None = None  # the whole code object could not be read
    kernel_errors: dict[str, str] = field(default_factory=dict)  # symbol → why that kernel could not

    def error_for(self, symbol: str) -> str | None:
        """Why ``symbol`` has no disassembly (None when it has one)."""
        if symbol in self.functions:
            return None
        return self.kernel_errors.get(symbol) or self.error or f"no function symbol {symbol!r} in .text"


def _functions_to_json(functions: list[Function]) -> str:
    return json.dumps(
        [
            {
                "name": fn.name,
                "address": fn.address,
                "size": fn.size,
                "instructions": [[i.address, i.mnemonic, i.operands] for i in fn.instructions],
            }
            for fn in functions
        ]
    )


def _functions_from_json(text: str) -> list[Function]:
    rows = json.loads(text)
    return [
        Function(
            str(row["name"]),
            int(row["address"]),
            int(row["size"]),
            [Instruction(int(a), str(m), str(o)) for a, m, o in row["instructions"]],
        )
        for row in rows
    ]


def _clip(text: str) -> str:
    text = " ".join(line.strip() for line in text.strip().splitlines()[-6:] if line.strip())
    return text[-MAX_ERROR_CHARS:]


def _run_child(
    data: bytes, arch: str, only: str | None, timeout_s: float, python: str
) -> tuple[list[Function] | None, str]:
    """(functions, '') or (None, why the child gave none)."""
    argv = [python, "-m", "workers.isa.isolate", "--arch", arch]
    if only is not None:
        argv += ["--function", only]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    try:
        proc = subprocess.run(argv, input=data, capture_output=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return None, f"LLVM disassembler ran past {timeout_s:g} s and was stopped"
    except OSError as exc:
        return None, f"cannot start the disassembler process: {exc}"
    stderr = proc.stderr.decode("utf-8", errors="replace")
    if proc.returncode == 3:  # the child's own "unavailable" answer (missing wheel, no .text)
        return None, _clip(stderr) or "disassembler unavailable"
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return None, f"LLVM disassembler died ({how}): {_clip(stderr) or 'no message'}"
    try:
        return _functions_from_json(proc.stdout.decode("utf-8")), ""
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"disassembler output unreadable: {exc}"


def disassemble_isolated(
    data: bytes,
    arch: str,
    engine: str | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
    python: str = sys.executable,
) -> Disassembly:
    """Every kernel of one ELF code object, never raising for a disassembler failure."""
    chosen = engine or engine_for(arch)
    if not arch or arch not in KNOWN_ARCHS:
        return Disassembly(engine=chosen, error=f"unknown processor {arch!r}: not disassembled")
    if chosen == "objdump":
        try:
            return Disassembly({fn.name: fn for fn in disassemble(data, arch, "objdump")}, "objdump")
        except DisassemblyUnavailable as exc:
            return Disassembly(engine="objdump", error=str(exc))
    functions, why = _run_child(data, arch, None, timeout_s, python)
    if functions is not None:
        return Disassembly({fn.name: fn for fn in functions}, chosen)
    try:
        names = [name for name, _, _ in function_symbols(data)]
    except Exception:  # a damaged symbol table only means no per-kernel retry
        names = []
    result = Disassembly(engine=chosen, error=why)
    if len(names) < 2 or why.startswith(("LLVM disassembler ran past", "cannot start")):
        return result
    for index, name in enumerate(names):  # one kernel at a time: a bad one costs only itself
        single, single_why = _run_child(data, arch, name, timeout_s, python)
        if single is None:
            if index == 0 and single_why == why:  # the same failure alone: it is the arch, not a kernel
                result.kernel_errors = dict.fromkeys(names, why)
                return result
            result.kernel_errors[name] = single_why
            continue
        result.functions.update({fn.name: fn for fn in single})
    if result.functions:
        result.error = None
    return result


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--function", default=None)
    args = parser.parse_args(argv)
    data = sys.stdin.buffer.read()
    try:
        functions = disassemble_llvm(data, args.arch, only=args.function)
    except DisassemblyUnavailable as exc:
        print(str(exc), file=sys.stderr)
        return 3
    sys.stdout.write(_functions_to_json(functions))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
