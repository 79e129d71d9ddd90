"""The sweep request (DESIGN §7 wire shape). Unknown fields are rejected; every error names its field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kernels.arches import ARCH_NAMES, get_arch, require_arch
from kernels.families.base import InvalidVariant
from kernels.formats.registry import FORMATS
from kernels.packages.layouts import check_format
from kernels.packages.package import KernelPackage
from kernels.profiles import load_profiles
from service.sweeps.policy import PHASE_M

KNOWN_ARCHES = ARCH_NAMES
MAX_TASKS = 20_000
KERNEL_REF_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}(@[0-9a-f]{4,64})?$"


class ShapeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.\-]+$")
    n: int = Field(gt=0, le=1 << 28)
    k: int = Field(gt=0, le=1 << 24)


class SweepSpec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "arch": "host",
                    "phase": "decode",
                    "formats": ["Q8_0", "Q4_0"],
                    "profile": "smoke",
                    "m": [1, 2],
                    "strategy": "exhaustive",
                    "min_dispatches": 20,
                    "labels": {"ci_run": "1234"},
                }
            ]
        },
    )

    arch: str = Field(
        json_schema_extra={"enum": list(ARCH_NAMES)}, description="one row of kernels/arches.py"
    )
    phase: Literal["decode", "prefill"]
    kernel: str | None = Field(
        None,
        pattern=KERNEL_REF_PATTERN,
        description="kernel package name or name@<sha256 prefix>; default: the phase's built-in package",
    )
    formats: list[str] = Field(min_length=1, max_length=32)
    profile: str | None = None
    shapes: list[ShapeSpec] | None = Field(None, min_length=1, max_length=256)
    m: list[int] | None = Field(None, min_length=1, max_length=32)
    variants: list[str] | None = Field(None, min_length=1, max_length=512)
    strategy: Literal["race", "exhaustive"] = "exhaustive"
    min_dispatches: int = Field(20, ge=3, le=100_000)
    max_dispatches: int = Field(200, ge=3, le=1_000_000)
    warmup: int = Field(3, ge=0, le=10_000)
    warm_cache: bool = False
    seed: int = Field(0, ge=0, le=2**31 - 1)
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)
    include_observed: bool = Field(
        False,
        description="also tune the observed shapes (POST /v1/observed-shapes) of this arch/phase/formats",
    )

    skip_spilling: bool = Field(
        False, description="leave out variants whose stored ISA pre-screen for this arch shows spills"
    )

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str) -> str:
        return require_arch(value)

    def problems(self, package: KernelPackage) -> list[SpecProblem]:
        """Cross-field checks pydantic cannot express, against the resolved package; each names its field."""
        found: list[SpecProblem] = []
        for index, name in enumerate(self.formats):
            if name not in FORMATS:
                found.append(
                    SpecProblem(("formats", index), f"unknown format {name!r}; known: {', '.join(FORMATS)}")
                )
        if len(set(self.formats)) != len(self.formats):
            found.append(SpecProblem(("formats",), "formats must not repeat"))
        if (self.profile is None) == (self.shapes is None):
            found.append(SpecProblem(("profile",), "give exactly one of 'profile' or 'shapes'"))
        elif self.profile is not None and self.profile not in load_profiles():
            found.append(
                SpecProblem(
                    ("profile",), f"unknown profile {self.profile!r}; known: {', '.join(load_profiles())}"
                )
            )
        allowed_m = PHASE_M[self.phase]
        for index, m in enumerate(self.m or []):
            if m not in allowed_m:
                found.append(
                    SpecProblem(("m", index), f"M={m} is not in the {self.phase} M policy {list(allowed_m)}")
                )
        for index, shape in enumerate(self.shapes or []):
            for name in self.formats:
                if name in FORMATS and shape.k % FORMATS[name].block_weights:
                    block = FORMATS[name].block_weights
                    found.append(
                        SpecProblem(
                            ("shapes", index, "k"),
                            f"K={shape.k} is not a multiple of {name}'s {block}-weight block",
                        )
                    )
        if self.min_dispatches > self.max_dispatches:
            found.append(SpecProblem(("min_dispatches",), "min_dispatches must not exceed max_dispatches"))
        backend = get_arch(self.arch).backend
        if package.source_key(backend) is None:
            have = ", ".join(package.manifest.sources)
            found.append(
                SpecProblem(
                    ("kernel",),
                    f"package {package.name} has no source that the {backend} backend ({self.arch}) can run "
                    f"(it has: {have})",
                )
            )
        for index, variant in enumerate(self.variants or []):
            try:
                package.parse(variant, backend)
            except InvalidVariant as error:
                found.append(SpecProblem(("variants", index), str(error)))
        if not self.variants and not package.space(backend):
            found.append(
                SpecProblem(("kernel",), f"package {package.name} has no valid variant for {backend}")
            )
        for index, name in enumerate(self.formats):
            if name not in FORMATS:
                continue
            if name not in package.manifest.formats:
                found.append(
                    SpecProblem(
                        ("formats", index),
                        f"package {package.name} does not read {name} "
                        f"(it reads {', '.join(package.manifest.formats)})",
                    )
                )
                continue
            reason = check_format(package.manifest.weights, name)
            if reason:
                found.append(SpecProblem(("formats", index), reason))
        if not found and self.task_count() > MAX_TASKS:
            found.append(
                SpecProblem(
                    ("formats",), f"the sweep expands to {self.task_count()} tasks (limit {MAX_TASKS})"
                )
            )
        return found

    def resolved_m(self) -> list[int]:
        return list(self.m) if self.m else list(PHASE_M[self.phase])

    def resolved_shapes(self) -> list[ShapeSpec]:
        if self.shapes is not None:
            return list(self.shapes)
        assert self.profile is not None
        return [ShapeSpec(name=s.name, n=s.n, k=s.k) for s in load_profiles()[self.profile]]

    def resolved_variants(self, package: KernelPackage) -> list[str]:
        if self.variants:
            return list(self.variants)
        return [variant.name for variant in package.space(get_arch(self.arch).backend)]

    def task_count(self) -> int:
        return len(self.formats) * len(self.resolved_shapes()) * len(self.resolved_m())


@dataclass(frozen=True)
class SpecProblem:
    location: tuple[str | int, ...]
    message: str

    @property
    def field(self) -> str:
        return ".".join(str(part) for part in self.location)
