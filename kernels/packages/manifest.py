"""`tunebase-kernel.toml`: the manifest of a kernel package (DESIGN §9), validated before anything runs.

Every error names the manifest key it is about (``params.ROWS``, ``args.2.size``, ``launch.grid.0``) and
the reason, because the reader is a kernel engineer looking at their own TOML file. Expressions are
checked against the names they may use, so a restriction naming an unknown parameter fails at upload.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from kernels.packages.expressions import ExpressionError, parse

MANIFEST_NAME = "tunebase-kernel.toml"
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"
PARAM_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,31}$"
SOURCE_BACKENDS = ("host", "hip", "cuda")  # hip = one HIP-dialect source for rocm (hipcc/clang) and cuda
MAX_PARAM_VALUES = 64
# a bound on the cartesian product walked per backend (rules evaluated per point: ~0.1 ms each); 8192 since
# tb-prefill's third NVIDIA engine (3 x 3888 / 2 = 5832 points, each backend's space walked in ~0.7 s), 16384
# since its fourth (engine 3, 2-CTA clusters: 10368 points), 17280 since tb-decode's third split-K value
# (kb 5 for its tensor-core kernel: 4 x 3 x 2 x 5 x 4 x 4 x 9 points, each backend's space walked in ~0.6 s),
# 20480 since its tenth pp value (19200 points; the space walk prunes at the first broken rule: ~0.35 s for
# tb-decode's CUDA space, every built-in package and backend in ~0.6 s), 25600 since its RG16 K phases
# (pp 10 / 11 / 12: 24960 points), 34560 since the same kernels with x quantised once per launch (pp 13-17:
# 34560 points)
MAX_POINTS = 38400

# names every expression may read besides the package's parameters and derived values
PROBLEM_NAMES = frozenset({"n", "k", "m"})
DEVICE_NAMES = frozenset({"cus", "wave", "backend", "arch"})
FORMAT_NAMES = frozenset({"format", "block_weights", "block_bytes", "row_bytes"})  # format: e.g. "Q4_K"

ArgRole = Literal["weights", "x", "y", "workspace", "m", "n", "k", "scalar", "gguf"]
ExpressionText = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VariantSection(_Strict):
    name: str = Field(min_length=1, max_length=200, description="canonical name template, e.g. R{ROWS}/U{U}")
    symbol: str = Field("kernel", min_length=1, max_length=200, description="entry symbol (template)")
    instantiate: str | None = Field(
        None,
        max_length=500,
        description="template-instantiation form: a macro call per variant, e.g. MY_VARIANT({ROWS}, {U}); "
        "all variants of one format and arch then compile in one translation unit",
    )
    list_define: str | None = Field(
        None, pattern=PARAM_PATTERN, description="the define that receives the joined instantiations"
    )


class LaunchSection(_Strict):
    block: list[ExpressionText] = Field(default_factory=lambda: ["64", "1", "1"], min_length=3, max_length=3)
    grid: list[ExpressionText] = Field(default_factory=lambda: ["1", "1", "1"], min_length=3, max_length=3)
    shared_bytes: ExpressionText = "0"


class ArgSpec(_Strict):
    role: ArgRole
    name: str | None = Field(None, pattern=PARAM_PATTERN)
    part: str | None = Field(None, pattern=PARAM_PATTERN, description="array of a multi-array layout")
    dtype: Literal["f32", "f16", "i32", "u32", "i64", "u8"] | None = None
    size: ExpressionText | None = Field(None, description="workspace bytes")
    zero: bool = Field(False, description="workspace zeroed once before the first launch")
    value: ExpressionText | None = Field(None, description="scalar value")
    backends: list[Literal["host", "rocm", "cuda"]] = Field(
        default_factory=list, description="only these backends pass it (default: all)"
    )


class TableSection(_Strict):
    struct: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    fields: list[str] = Field(min_length=1, max_length=16)


class ParitySection(_Strict):
    cosine_min: float = Field(0.999, ge=0.9, le=1.0)
    rel_l2_max: float = Field(2e-2, gt=0.0, le=0.5)


class RestrictionsSection(_Strict):
    rules: list[ExpressionText] = Field(default_factory=list, max_length=64)


class PrepareSection(_Strict):
    symbol: str = Field(min_length=1, max_length=200)
    size: ExpressionText = Field(description="bytes of the prepared layout per weight buffer")
    block: list[ExpressionText] = Field(default_factory=lambda: ["256", "1", "1"], min_length=3, max_length=3)
    grid: list[ExpressionText] = Field(default_factory=lambda: ["ceil_div(n, 256)", "1", "1"])


class PrelaunchSection(_Strict):
    """A kernel launched right before every launch of the variant, and timed with it (DESIGN §9).

    Why: work that belongs to one launch but not to each tile, e.g. quantising the activations once per
    launch into a workspace (or zeroing y for split-K), instead of once per workgroup. It takes the same
    argument list as the variant; the dispatch's device time is the sum of both kernels.
    """

    symbol: str = Field(min_length=1, max_length=200, description="entry symbol; may name params")
    block: list[ExpressionText] = Field(default_factory=lambda: ["256", "1", "1"], min_length=3, max_length=3)
    grid: list[ExpressionText] = Field(min_length=3, max_length=3)
    shared_bytes: ExpressionText = "0"
    backends: list[Literal["host", "rocm", "cuda"]] = Field(
        default_factory=list, description="only these backends launch it (default: all)"
    )
    when: ExpressionText = Field(
        "1", description="over the variant's parameters: only the variants where it is true have it"
    )
    overlap: bool = Field(
        False,
        description=(
            "CUDA: the variant is a programmatic dependent launch in one graph with the prelaunch kernel "
            "(sm_90 griddepcontrol), so it may start before the prelaunch kernel ends: it must execute "
            "griddepcontrol.wait before it reads what the prelaunch kernel writes. The dispatch's device "
            "time is then the span from the prelaunch kernel's start to the variant's end"
        ),
    )


class Manifest(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    phase: Literal["decode", "prefill"]
    description: str = Field("", max_length=2000)
    formats: list[str] = Field(min_length=1, max_length=64)
    weights: str = Field("gguf", pattern=r"^[a-z0-9][a-z0-9-]*$")
    activations: Literal["f32"] = "f32"
    sources: dict[str, list[str]]
    params: dict[str, list[int]] = Field(min_length=1, max_length=16)
    params_doc: dict[str, str] = Field(default_factory=dict, description="meaning of each parameter")
    restrictions: RestrictionsSection = Field(default_factory=RestrictionsSection)
    derived: dict[str, ExpressionText] = Field(
        default_factory=dict, description="named values for launch/args, evaluated in order"
    )
    variant: VariantSection
    launch: LaunchSection = Field(default_factory=LaunchSection)
    args: list[ArgSpec] = Field(min_length=1, max_length=32)
    table: TableSection | None = None
    parity: ParitySection = Field(default_factory=ParitySection)
    prepare: PrepareSection | None = None
    prelaunch: PrelaunchSection | None = None

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for backend, files in value.items():
            if backend not in SOURCE_BACKENDS:
                raise ValueError(f"unknown source backend {backend!r}; known: {', '.join(SOURCE_BACKENDS)}")
            if not files:
                raise ValueError(f"{backend}: list at least one file")
        if not value:
            raise ValueError("name at least one backend's sources")
        return value

    @field_validator("params")
    @classmethod
    def _params(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        for name, values in value.items():
            if not re.match(PARAM_PATTERN, name):
                raise ValueError(f"{name!r}: parameter names are C identifiers")
            if not values or len(values) > MAX_PARAM_VALUES:
                raise ValueError(f"{name}: between 1 and {MAX_PARAM_VALUES} values")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: values repeat")
        return value


class ManifestError(ValueError):
    """A manifest that cannot be used; ``problems`` are (manifest key, reason) pairs."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{key}: {reason}" for key, reason in problems))


def load_manifest(text: str) -> Manifest:
    """Parse TOML text and validate it completely; ManifestError lists every problem by key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ManifestError([(MANIFEST_NAME, f"not valid TOML: {error}")]) from None
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            key = ".".join(str(part) for part in item["loc"]) or MANIFEST_NAME
            reason = item["msg"]
            if item["type"] == "extra_forbidden":
                reason = "unknown key"
            problems.append((key, reason))
        raise ManifestError(problems) from None
    problems = semantic_problems(manifest)
    if problems:
        raise ManifestError(problems)
    return manifest


def _template_fields(template: str) -> set[str]:
    return set(re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template))


def _when_evaluation_problems(manifest: Manifest, source: str) -> list[tuple[str, str]]:
    """``prelaunch.when`` evaluated at every parameter combination (it reads parameters only).

    Why: an expression that parses but fails on some variant (``pp // 0``, ``log2(pp - 1)``) would otherwise
    fail every task that plans that variant, long after the upload was accepted.
    """
    try:
        expression = parse(source)
    except ExpressionError:
        return []  # reported by the name check
    if not expression.names <= set(manifest.params):
        return []
    names = sorted(expression.names)
    if math.prod(len(manifest.params[name]) for name in names) > MAX_POINTS:
        return []  # the space is too large to load at all: the points check reports it, nothing is enumerated
    for values in itertools.product(*(manifest.params[name] for name in names)):
        bindings = dict(zip(names, values, strict=True))
        try:
            expression.evaluate(bindings)
        except ExpressionError as error:
            at = ", ".join(f"{name}={value}" for name, value in bindings.items())
            return [("prelaunch.when", f"fails at {at}: {error}")]
    return []


def semantic_problems(manifest: Manifest) -> list[tuple[str, str]]:
    """Checks across keys: names used by expressions and templates exist, roles are complete."""
    from kernels.formats.registry import FORMATS
    from kernels.packages.layouts import LAYOUTS

    found: list[tuple[str, str]] = []
    params = set(manifest.params)
    for index, fmt in enumerate(manifest.formats):
        if fmt not in FORMATS:
            found.append((f"formats.{index}", f"unknown format {fmt!r}; known: {', '.join(FORMATS)}"))
    if manifest.weights != "prepare" and manifest.weights not in LAYOUTS:
        known = ", ".join(["prepare", *LAYOUTS])
        found.append(("weights", f"unknown layout {manifest.weights!r}; known: {known}"))
    if manifest.weights == "prepare" and manifest.prepare is None:
        found.append(("prepare", "weights = 'prepare' needs a [prepare] section"))
    if manifest.prepare is not None and manifest.weights != "prepare":
        found.append(("prepare", "a [prepare] section needs weights = 'prepare'"))

    space_names = params | DEVICE_NAMES
    point_names = space_names | PROBLEM_NAMES | FORMAT_NAMES

    def check(key: str, source: str, allowed: set[str] | frozenset[str]) -> None:
        try:
            expression = parse(source)
        except ExpressionError as error:
            found.append((key, str(error)))
            return
        unknown = expression.names - allowed
        if unknown:
            found.append((key, f"unknown name(s) {', '.join(sorted(unknown))} in {source!r}"))

    derived_names: set[str] = set()
    for name, source in manifest.derived.items():
        if not re.match(PARAM_PATTERN, name):
            found.append((f"derived.{name}", "derived names are identifiers"))
        if name in point_names:
            found.append((f"derived.{name}", "shadows a parameter or a built-in name"))
        check(f"derived.{name}", source, point_names | derived_names)
        derived_names.add(name)
    for index, rule in enumerate(manifest.restrictions.rules):  # a rule may read [derived] values (per point)
        check(f"restrictions.rules.{index}", rule, point_names | derived_names)
    launch_names = point_names | derived_names
    for axis in ("block", "grid"):
        for index, source in enumerate(getattr(manifest.launch, axis)):
            check(f"launch.{axis}.{index}", source, launch_names)
    check("launch.shared_bytes", manifest.launch.shared_bytes, launch_names)

    for key, template in (
        ("variant.name", manifest.variant.name),
        ("variant.symbol", manifest.variant.symbol),
    ):
        unknown = _template_fields(template) - params
        if unknown:
            found.append((key, f"unknown parameter(s) {', '.join(sorted(unknown))}"))
    if not _template_fields(manifest.variant.name) >= params:
        missing = params - _template_fields(manifest.variant.name)
        found.append(("variant.name", f"must name every parameter; missing {', '.join(sorted(missing))}"))
    if manifest.variant.instantiate is not None:
        if manifest.variant.list_define is None:
            found.append(("variant.list_define", "needed with variant.instantiate"))
        if not _template_fields(manifest.variant.symbol):
            found.append(("variant.symbol", "with variant.instantiate each variant needs its own symbol"))
        unknown = _template_fields(manifest.variant.instantiate) - params
        if unknown:
            found.append(("variant.instantiate", f"unknown parameter(s) {', '.join(sorted(unknown))}"))

    roles = [arg.role for arg in manifest.args]
    for role in ("x", "y"):
        if roles.count(role) != 1:
            found.append(("args", f"exactly one argument with role {role!r} (found {roles.count(role)})"))
    if "weights" not in roles:
        found.append(("args", "an argument with role 'weights' is required"))
    for index, arg in enumerate(manifest.args):
        if arg.role == "workspace" and arg.size is None:
            found.append((f"args.{index}.size", "a workspace needs a size expression (bytes)"))
        if arg.role == "scalar" and arg.value is None:
            found.append((f"args.{index}.value", "a scalar needs a value expression"))
        if arg.size is not None:
            check(f"args.{index}.size", arg.size, launch_names)
        if arg.value is not None:
            check(f"args.{index}.value", arg.value, launch_names)
        if arg.role == "gguf" and manifest.weights != "prepare":
            found.append((f"args.{index}.role", "role 'gguf' is for the [prepare] kernel only"))
    if manifest.table is not None:
        for index, field_name in enumerate(manifest.table.fields):
            if field_name not in params:
                found.append((f"table.fields.{index}", f"{field_name!r} is not a parameter"))
    for name in manifest.params_doc:
        if name not in params:
            found.append((f"params_doc.{name}", "documents a parameter that does not exist"))
    if manifest.prepare is not None:
        check("prepare.size", manifest.prepare.size, PROBLEM_NAMES | FORMAT_NAMES | DEVICE_NAMES)
    if manifest.prelaunch is not None:
        pre = manifest.prelaunch
        for axis in ("block", "grid"):
            for index, source in enumerate(getattr(pre, axis)):
                check(f"prelaunch.{axis}.{index}", source, launch_names)
        check("prelaunch.shared_bytes", pre.shared_bytes, launch_names)
        check("prelaunch.when", pre.when, params)
        found.extend(_when_evaluation_problems(manifest, pre.when))
        unknown = _template_fields(pre.symbol) - params
        if unknown:
            found.append(("prelaunch.symbol", f"unknown parameter(s) {', '.join(sorted(unknown))}"))
    points = 1
    for values in manifest.params.values():
        points *= len(values)
    if points > MAX_POINTS:
        found.append(("params", f"the space has {points} points (limit {MAX_POINTS})"))
    return found
