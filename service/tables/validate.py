"""Validation of a generated table (DESIGN §6: a table is valid only if it
compiles, keys are sorted and unique, every codebook id is known, and a lookup
replay reproduces the chosen variants).

Checks run on the emitted text, not only on the data it came from, so a
rendering bug cannot ship a table that silently answers something else.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernels.packages.package import KernelPackage
from service.tables.dialects import get_dialect
from service.tables.dialects.base import TableDialect
from service.tables.model import AtPoint, TableChoice

HEADER_NAME = "generated_table.inc"
COMPILE_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 60.0


class TableValidationError(ValueError):
    """A table (or the data it is rendered from) failed validation."""

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = tuple(failures)
        super().__init__("table validation failed:\n  " + "\n  ".join(self.failures))


@dataclass(frozen=True)
class ExpectedAnswer(AtPoint):
    """What the table must answer at one query; config None means 'no answer'."""

    codebook: int
    m: int
    n: int
    k: int
    config: tuple[int, ...] | None
    must_answer: bool = False  # probes: must return true with a known config


@dataclass(frozen=True)
class TableExpectations:
    """Everything validate_table checks the text against."""

    answers: tuple[ExpectedAnswer, ...]
    known_codebooks: frozenset[int]
    allowed_configs: frozenset[tuple[int, ...]]
    dialect: str = "llaminar-rocm-decode"
    phase: str | None = None  # binds phase-agnostic dialects (json)
    package: KernelPackage | None = None  # binds package-bound dialects (struct-table) and json
    variants: frozenset[str] | None = None  # the table's variant names (json picks its codec by them)


@dataclass(frozen=True)
class ValidationReport:
    """Outcome of validation; `failures` empty means the table is valid."""

    failures: tuple[str, ...]
    checks: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())
    replayed: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def raise_for_failures(self) -> None:
        if self.failures:
            raise TableValidationError(self.failures)


def find_compiler() -> list[str]:
    """The C++ compiler argv prefix: $CXX if set, else c++ or g++ on PATH."""
    env = os.environ.get("CXX")
    if env:
        return shlex.split(env)
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    raise TableValidationError(["no C++ compiler found (set CXX or install g++)"])


def check_choices(
    choices: Sequence[TableChoice],
    known_codebooks: frozenset[int],
    dialect: TableDialect,
) -> list[str]:
    """Data checks before rendering: ids known, keys representable, M on policy, keys unique."""
    failures: list[str] = []
    codec = dialect.codec
    keys: dict[int, dict[int, TableChoice]] = defaultdict(dict)
    for c in choices:
        where = f"CB={c.codebook} M={c.m} {c.n}x{c.k} ({c.shape})"
        if c.codebook not in known_codebooks or not 0 <= c.codebook <= 0xFF:
            failures.append(f"{where}: unknown codebook id {c.codebook}")
        if not (1 <= c.m <= codec.max_m and 1 <= c.n <= codec.max_n and 1 <= c.k <= codec.max_k):
            failures.append(f"{where}: M/N/K out of the key's range (would alias)")
            continue
        if codec.m_key(c.m) != c.m:
            failures.append(
                f"{where}: M={c.m} is not an M-policy bucket (run time looks up {codec.m_key(c.m)})"
            )
        try:
            dialect.parse_variant(c.variant)
        except ValueError as exc:
            failures.append(f"{where}: {exc}")
        key = codec.pack_key(c.m, c.n, c.k)
        if key in keys[c.codebook]:
            failures.append(f"{where}: duplicate choice for key 0x{key:016X}")
        keys[c.codebook][key] = c
    return failures


def _run(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)


def _check_keys(text: str, dialect: TableDialect, exp: TableExpectations) -> list[str]:
    failures: list[str] = []
    for cb, keys in dialect.emitted_keys(text).items():
        if not keys:
            failures.append(f"codebook {cb}: empty exact table")
        for a, b in itertools.pairwise(keys):
            if a == b:
                failures.append(f"codebook {cb}: duplicate key 0x{a:016X}")
            elif a > b:
                failures.append(f"codebook {cb}: key 0x{b:016X} after 0x{a:016X} (unsorted)")
    for cb in sorted(dialect.emitted_codebooks(text)):
        if cb not in exp.known_codebooks:
            failures.append(f"emitted codebook id {cb} is not known")
    return failures


def _check_replay(
    text: str,
    dialect: TableDialect,
    exp: TableExpectations,
    compiler: list[str],
    workdir: Path,
    timeout_s: float,
) -> tuple[list[str], int]:
    queries = [a.point for a in exp.answers]
    source = workdir / "replay.cpp"
    source.write_text(dialect.replay_program(HEADER_NAME, queries))
    binary = workdir / "replay"
    build = _run(
        [*compiler, "-std=c++17", "-O0", "-I", str(workdir), str(source), "-o", str(binary)],
        workdir,
        timeout_s,
    )
    if build.returncode != 0:
        return [f"replay program does not compile:\n{build.stderr.strip()}"], 0
    run = _run([str(binary)], workdir, RUN_TIMEOUT_S)
    if run.returncode != 0:
        return [f"replay program exited {run.returncode}: {run.stderr.strip()}"], 0
    got = dialect.parse_replay_output(run.stdout)
    return _compare(got, exp), len(got)


def find_nvcc() -> list[str] | None:
    """nvcc argv prefix: $NVCC if set, else nvcc on PATH; None when there is none."""
    env = os.environ.get("NVCC")
    if env:
        return shlex.split(env)
    path = shutil.which("nvcc")
    return [path] if path else None


def _check_cuda(source: str, workdir: Path, timeout_s: float) -> tuple[list[str], str]:
    """Compile a CUDA unit calling the lookup on the device (sm_90); no nvcc is a warning, not a failure."""
    nvcc = find_nvcc()
    if nvcc is None:
        return [], "nvcc not found: the CUDA (device-side) compile was not checked"
    unit = workdir / "device_probe.cu"
    unit.write_text(source)
    argv = [*nvcc, "-std=c++17", "-arch=sm_90", "-Werror", "all-warnings", "-I", str(workdir),
            "-c", str(unit), "-o", str(workdir / "device_probe.o")]  # fmt: skip
    try:
        built = _run(argv, workdir, timeout_s)
    except subprocess.TimeoutExpired:
        return [f"nvcc device compile timed out after {timeout_s}s"], ""
    if built.returncode != 0:
        return [f"header does not compile for the device (nvcc -arch=sm_90):\n{built.stderr.strip()}"], ""
    return [], "compiles for the device (nvcc -arch=sm_90, lookup called in a __global__)"


def _compare(
    got: dict[tuple[int, int, int, int], tuple[int, ...] | None], exp: TableExpectations
) -> list[str]:
    failures: list[str] = []
    for a in exp.answers:
        where = f"CB={a.codebook} M={a.m} {a.n}x{a.k}"
        if a.point not in got:
            failures.append(f"{where}: no replay output")
            continue
        answer = got[a.point]
        if a.must_answer and answer is None:
            failures.append(f"{where}: fallback gave no answer for an unseen shape")
        if answer is not None and answer not in exp.allowed_configs:
            failures.append(f"{where}: answered {answer}, not a known variant")
        if answer != a.config:
            failures.append(f"{where}: replay answered {answer}, expected {a.config}")
    return failures


def validate_table(
    text: str,
    expectations: TableExpectations,
    *,
    timeout_s: float = COMPILE_TIMEOUT_S,
) -> ValidationReport:
    """Compile, key-check and replay `text`; never raises for table defects."""
    dialect = get_dialect(
        expectations.dialect, expectations.phase, expectations.package, expectations.variants
    )
    failures: list[str] = []
    checks: list[str] = []
    warnings: list[str] = []
    replayed = 0

    try:
        key_failures = _check_keys(text, dialect, expectations)
    except ValueError as exc:
        key_failures = [f"cannot parse emitted tables: {exc}"]
    failures += key_failures
    if not key_failures:
        checks += ["keys sorted and unique", "codebook ids known"]

    if not dialect.compiled:
        with tempfile.TemporaryDirectory(prefix="tunebase-table-") as tmp:
            try:
                got = dialect.replay_text(text, [a.point for a in expectations.answers], Path(tmp))
            except (ValueError, KeyError, TypeError) as exc:
                return ValidationReport(tuple([*failures, f"table text unreadable: {exc}"]), tuple(checks))
        replay_failures = _compare(got, expectations)
        failures += replay_failures
        if not replay_failures:
            checks.append(f"replay reproduces {len(got)} answers")
        return ValidationReport(tuple(failures), tuple(checks), (), len(got))

    try:
        compiler = find_compiler()
    except TableValidationError as exc:
        return ValidationReport(tuple(failures + list(exc.failures)), tuple(checks))

    with tempfile.TemporaryDirectory(prefix="tunebase-table-") as tmp:
        workdir = Path(tmp)
        header = workdir / HEADER_NAME
        header.write_text(text)
        # Check through a translation unit that includes the header twice, as an
        # engine would: this also proves `#pragma once` guards it (and avoids the
        # "pragma once in main file" warning of compiling the header directly).
        unit = workdir / "syntax_check.cpp"
        unit.write_text(f'#include "{HEADER_NAME}"\n#include "{HEADER_NAME}"\n')
        try:
            syntax = _run(
                [*compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-I", str(workdir), str(unit)],
                workdir,
                timeout_s,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"syntax check timed out after {timeout_s}s")
            return ValidationReport(tuple(failures), tuple(checks))
        if syntax.returncode != 0:
            failures.append(f"header does not compile:\n{syntax.stderr.strip()}")
            return ValidationReport(tuple(failures), tuple(checks))
        checks.append("compiles (c++ -std=c++17 -fsyntax-only)")
        if syntax.stderr.strip():
            warnings.append(syntax.stderr.strip())

        probe = getattr(dialect, "device_probe_source", None)
        if probe is not None:
            cuda_failures, cuda_note = _check_cuda(probe(HEADER_NAME), workdir, timeout_s)
            failures += cuda_failures
            (checks if cuda_note.startswith("compiles") else warnings).append(cuda_note)

        try:
            replay_failures, replayed = _check_replay(
                text, dialect, expectations, compiler, workdir, timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            replay_failures = [f"replay timed out: {exc}"]
        except ValueError as exc:
            replay_failures = [f"replay output unreadable: {exc}"]
        failures += replay_failures
        if not replay_failures:
            checks.append(f"replay reproduces {replayed} answers")

    return ValidationReport(tuple(failures), tuple(checks), tuple(warnings), replayed)
