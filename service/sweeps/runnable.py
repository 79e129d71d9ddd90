"""Refuse planned points where none of the sweep's variants can run (the package's point restrictions).

Why: such a task would be queued, claimed and measured as nothing but "restriction fails at this point"
rows; the request is where the user can still fix it (fewer M, other shapes, other variants).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kernels.arches import get_arch
from kernels.formats.registry import FORMATS
from kernels.packages.package import DeviceFacts, KernelPackage, Variant
from service.sweeps.planning import PlannedTask
from service.sweeps.spec import SpecProblem, SweepSpec

SHOWN_POINTS = 4  # points named in one message; the count says how many more


def unrunnable_point_problems(
    spec: SweepSpec,
    package: KernelPackage,
    variants: Mapping[str, list[str]],
    planned: Iterable[PlannedTask],
) -> list[SpecProblem]:
    """One problem per kind of cause: the field to change is ``variants`` when the spec lists them, else
    ``m`` when another planned M of the same (format, N, K) runs, else ``shapes``."""
    arch = get_arch(spec.arch)
    facts = DeviceFacts(arch.backend, spec.arch, arch.cus, arch.wave)
    parsed: dict[str, Variant] = {}

    def variant(name: str) -> Variant:
        if name not in parsed:
            parsed[name] = package.parse(name, arch.backend)
        return parsed[name]

    def runs(task: PlannedTask) -> bool:
        fmt = FORMATS[task.format]
        return any(
            package.point_holds(variant(name), task.n, task.k, task.m, fmt, facts)
            for name in variants[task.format]
        )

    tasks = list(planned)
    verdicts = {task: runs(task) for task in tasks}
    running_nk = {(t.format, t.n, t.k) for t, ok in verdicts.items() if ok}
    stuck: dict[str, list[PlannedTask]] = {}
    for task, ok in verdicts.items():
        if ok:
            continue
        if spec.variants:
            field = "variants"
        elif (task.format, task.n, task.k) in running_nk:
            field = "m"
        else:
            field = "shapes"
        stuck.setdefault(field, []).append(task)
    problems: list[SpecProblem] = []
    for field, points in stuck.items():
        shown = ", ".join(f"{t.format} {t.shape} ({t.n}x{t.k}) m={t.m}" for t in points[:SHOWN_POINTS])
        more = f" and {len(points) - SHOWN_POINTS} more" if len(points) > SHOWN_POINTS else ""
        problems.append(
            SpecProblem(
                (field,),
                f"no variant of {package.name} can run on {spec.arch} at {len(points)} planned point(s): "
                f"{shown}{more} (the package's restrictions rule every requested variant out there)",
            )
        )
    return problems
