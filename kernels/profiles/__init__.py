"""Shape inventories (DESIGN §4), shipped as data so a sweep can name a profile instead of shapes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PROFILE_FILE = Path(__file__).with_name("profiles.json")


@dataclass(frozen=True)
class Shape:
    name: str
    n: int
    k: int


@lru_cache
def load_profiles() -> dict[str, tuple[Shape, ...]]:
    raw: dict[str, object] = json.loads(PROFILE_FILE.read_text())
    resolved: dict[str, tuple[Shape, ...]] = {}

    def resolve(name: str) -> tuple[Shape, ...]:
        if name in resolved:
            return resolved[name]
        entry = raw[name]
        assert isinstance(entry, dict)
        shapes: list[Shape] = []
        for included in entry.get("include", []):
            shapes.extend(resolve(included))
        shapes.extend(Shape(s["name"], int(s["n"]), int(s["k"])) for s in entry.get("shapes", []))
        resolved[name] = tuple(shapes)
        return resolved[name]

    for profile_name in raw:
        resolve(profile_name)
    return resolved


def profile_shapes(name: str) -> tuple[Shape, ...]:
    profiles = load_profiles()
    if name not in profiles:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]
