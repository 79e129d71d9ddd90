"""The kernel-family plug-in point: a family declares its variant space and its constraints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Variant:
    """One point of a family's parameter space, named canonically (e.g. ``KB8/TW8``)."""

    family: str
    name: str
    params: dict[str, int] = field(hash=False, compare=False)
    order: int = 0  # position in the family's declared order (lower = simpler); breaks ties


class InvalidVariant(ValueError):
    """A variant name that does not parse or violates a family constraint; the message says why."""


def resolve_variant(
    name: str,
    canonical: str,
    failed: Callable[[], list[str]],
    space: Callable[[str], list[Variant]],
    backend: str,
) -> Variant:
    """How every family's parse ends once the name's numbers are read: canonical spelling, then the
    reasons of the constraints that `failed`, then the variant itself from the backend's space."""
    if canonical != name:
        raise InvalidVariant(f"{name!r} is not canonical; write {canonical}")
    failures = failed()
    if failures:
        raise InvalidVariant(f"{name}: " + "; ".join(failures))
    for variant in space(backend):
        if variant.name == name:
            return variant
    # unreachable while the constraints mirror the axes; kept so a new constraint cannot slip through
    raise InvalidVariant(f"{name}: not in the {backend} space")


class KernelFamily(Protocol):
    name: str
    phase: str  # "decode" | "prefill"

    def space(self, backend: str) -> list[Variant]:
        """Every valid variant for a backend, in declared (simplest-first) order."""
        ...

    def parse(self, name: str, backend: str) -> Variant:
        """Parse a canonical name; raise InvalidVariant with the reason when it is not valid."""
        ...
