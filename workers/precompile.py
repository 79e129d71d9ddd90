"""The compile queue (DESIGN §8: compilation may run on CPU workers so GPUs only time).

When a sweep is enqueued, one compile message goes out per distinct unit set its tasks need, i.e. per
(package, version, format, arch, variant list): normally one per (package, format, arch). A
`tunebase worker --compile` process (no GPU, concurrency = cores) compiles it into the artifact
directory that the GPU workers of the host share. Nothing depends on it: a GPU task compiles on a
miss as before, and the per-key lock (workers/compilers/lock.py) makes the two meet on one compile.
A compile failure is logged and recorded beside the unit (cuda: ``.error.json``); the GPU tasks still
run and store each variant's compile error as they always did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from kernels.arches import get_arch
from kernels.packages.loader import package_for
from service.db.models import Task
from service.kernel_store import get_package
from workers.backends.base import TaskSpec, UnitCompile

log = logging.getLogger(__name__)

JobKey = tuple[str, str, str, str, tuple[str, ...]]  # kernel, version, format, arch, variants


@dataclass
class CompileReport:
    task_id: int
    kernel: str
    kernel_version: str
    format: str
    arch: str
    backend: str
    variants: int
    seconds: float = 0.0  # wall time of the whole job (lock waits included)
    units: list[UnitCompile] = field(default_factory=list)
    error: str = ""  # the job could not run at all (no task, unknown package, no precompiler)

    @property
    def ok(self) -> bool:
        return not self.error and all(u.ok for u in self.units)

    @property
    def compiled(self) -> int:
        return sum(u.compiled for u in self.units)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"], out["compiled"] = self.ok, self.compiled
        for unit in out["units"]:
            unit["log"] = unit["log"][-2000:]
        return out

    def line(self) -> str:
        """One greppable log line (bench/stack_run.py reads ``compile-job`` lines back)."""
        head = (
            f"compile-job task={self.task_id} kernel={self.kernel} format={self.format} arch={self.arch} "
            f"backend={self.backend} units={len(self.units)} compiled={self.compiled} ok={self.ok} "
            f"seconds={self.seconds:.1f}"
        )
        if self.error:
            return f"{head} error={self.error}"
        waits = [u.waited_s for u in self.units if u.waited_s]
        return head + (f" waited={max(waits):.1f}" if waits else "")


def precompiled_arch(arch: str, which: str = "gpu") -> bool:
    """``which`` is Settings.precompile: 'gpu' (the host backend's cc is quick, and nothing waits on it),
    'all', or 'off'."""
    if which == "off":
        return False
    try:
        backend = get_arch(arch).backend
    except KeyError:  # an arch no backend serves: its tasks will say so
        return False
    return which == "all" or backend != "host"


def compile_jobs(
    rows: Iterable[tuple[int, str, str, str, str, Sequence[str]]], which: str = "gpu"
) -> list[int]:
    """One representative task id per distinct (kernel, version, format, arch, variants).

    ``rows``: (task id, arch, format, kernel, kernel version, variants), in the order to compile;
    ``which``: the arches to precompile (``precompiled_arch``).
    """
    seen: dict[JobKey, int] = {}
    for task_id, arch, fmt, kernel, version, variants in rows:
        if precompiled_arch(arch, which):
            seen.setdefault((kernel, version, fmt, arch, tuple(variants)), int(task_id))
    return list(seen.values())


def precompile_task(factory: sessionmaker[Session], task_id: int, artifact_dir: Path) -> CompileReport:
    """Compile what task ``task_id`` will need (whatever its state: the units are shared by the sweep)."""
    from workers.backends.registry import backend_name_for_arch, create_backend
    from workers.runner import parse_variants

    started = time.monotonic()
    with factory() as session:
        task = session.get(Task, task_id)
        if task is None:
            return CompileReport(task_id, "", "", "", "", "", 0, error="no such task")
        report = CompileReport(
            task_id, task.kernel, task.kernel_version, task.format, task.arch, "", len(task.variants)
        )
        try:  # the same package object the GPU task loads (execute.task_spec, then package_for)
            root = str(get_package(session, task.kernel, task.kernel_version or None).root)
            package = package_for(task.phase, root, task.kernel)
        except Exception as error:  # an unknown or unreadable package: the GPU task will say so too
            report.error = f"package: {type(error).__name__}: {error}"
            return report
        phase, names = task.phase, tuple(str(v) for v in task.variants)
    try:
        report.backend = backend_name_for_arch(report.arch)
        backend = create_backend(report.backend, artifact_dir)
        precompile = getattr(backend, "precompile", None)
        if precompile is None:
            report.error = f"backend {report.backend} cannot compile without a device"
            return report
        spec = TaskSpec(report.arch, phase, report.format, "", 0, 0, 0, names)
        variants, _rejected = parse_variants(package, spec, report.backend)  # as run_task parses them
        report.units = precompile(package, report.arch, report.format, variants)
    except Exception as error:  # never fatal to the sweep: the GPU task compiles on its own
        report.error = f"{type(error).__name__}: {error}"
    finally:
        report.seconds = round(time.monotonic() - started, 2)
    return report
