"""Expand a sweep spec into task points, stratified by format so a capped sweep covers every format."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest

from service.sweeps.spec import SweepSpec


@dataclass(frozen=True)
class PlannedTask:
    format: str
    shape: str
    n: int
    k: int
    m: int


def plan_tasks(spec: SweepSpec) -> list[PlannedTask]:
    """Format-major lists interleaved round-robin: task i of every format comes before task i+1 of any."""
    per_format = [
        [
            PlannedTask(format=name, shape=shape.name, n=shape.n, k=shape.k, m=m)
            for shape in spec.resolved_shapes()
            for m in spec.resolved_m()
        ]
        for name in spec.formats
    ]
    seen: set[tuple[str, int, int, int]] = set()
    ordered: list[PlannedTask] = []
    for group in zip_longest(*per_format):
        for task in group:
            if task is None:
                continue
            key = (task.format, task.n, task.k, task.m)
            if key not in seen:  # two shape names for one (N, K) are one point
                seen.add(key)
                ordered.append(task)
    return ordered
