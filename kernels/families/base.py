"""The kernel-family plug-in point: a family declares its variant space and its constraints."""

from __future__ import annotations

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


class KernelFamily(Protocol):
    name: str
    phase: str  # "decode" | "prefill"

    def space(self, backend: str) -> list[Variant]:
        """Every valid variant for a backend, in declared (simplest-first) order."""
        ...

    def parse(self, name: str, backend: str) -> Variant:
        """Parse a canonical name; raise InvalidVariant with the reason when it is not valid."""
        ...
