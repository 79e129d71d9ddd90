"""A loaded kernel package: its variant space, names, symbols, launch geometry and sources.

A package implements the kernel-family protocol (``name``, ``phase``, ``space``, ``parse``), so every
caller that enumerates or validates variants treats the built-in families and an uploaded package alike.
Restrictions that read only parameters (and ``backend``) shape the space; those that read the problem
(``n``, ``k``, ``m``) or the device (``cus``, ``wave``, ``arch``) are checked per task by ``point_problems``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kernels.families.base import InvalidVariant, Variant
from kernels.formats.registry import QuantFormat
from kernels.packages.expressions import ExpressionError, Value, parse
from kernels.packages.manifest import (
    DEVICE_NAMES,
    FORMAT_NAMES,
    PROBLEM_NAMES,
    ArgSpec,
    Manifest,
    PrelaunchSection,
)

BACKEND_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "host": ("host",),
    "rocm": ("hip",),
    "cuda": ("cuda", "hip"),  # a CUDA-only source wins over the shared HIP-dialect one
}


@dataclass(frozen=True)
class DeviceFacts:
    """What launch expressions may read about the device (the arch table supplies defaults)."""

    backend: str
    arch: str
    cus: int
    wave: int

    def bindings(self) -> dict[str, Value]:
        return {"backend": self.backend, "arch": self.arch, "cus": self.cus, "wave": self.wave}


@dataclass(frozen=True)
class Geometry:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    values: dict[str, Value] = field(default_factory=dict, compare=False)  # every bound name

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


def content_version(files: Mapping[str, bytes]) -> str:
    """sha256 over sorted (relative path, bytes): the same folder always gets the same version."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


def _template_regex(template: str, params: list[str]) -> re.Pattern[str]:
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", template)
    pattern = "".join(
        f"(?P<{part[1:-1]}>-?\\d+)" if part[1:-1] in params else re.escape(part) for part in parts
    )
    return re.compile(f"^{pattern}$")


_UNBOUND = object()  # a name the bindings lack (its rule then fails to evaluate, with the reason)


def _broken(rules: list[tuple[str, Any]], bindings: Mapping[str, Value]) -> list[str]:
    """The rules that do not hold (a rule that cannot be evaluated is broken, with the reason)."""
    failed = []
    for rule, expression in rules:
        try:
            ok = bool(expression.evaluate(bindings))
        except ExpressionError as error:
            failed.append(f"{rule} ({error})")
            continue
        if not ok:
            failed.append(rule)
    return failed


# The error a runner stores for a variant whose restrictions exclude the task's point (e.g. tb-decode's MX1 at
# M = 2): the variant is not applicable there, which is not a parity failure and must not fail a CI gate.
NOT_APPLICABLE_PREFIX = "restriction fails at this point: "


class KernelPackage:
    """A validated manifest plus the folder that holds its sources."""

    def __init__(self, manifest: Manifest, root: Path, files: Mapping[str, bytes], builtin: bool = False):
        self.manifest = manifest
        self.root = Path(root)
        self.files = dict(files)
        self.builtin = builtin
        self.version = content_version(self.files)
        self._spaces: dict[str, dict[str, Variant]] = {}  # per backend; the manifest never changes
        self._rule_verdicts: dict[tuple[Any, ...], Any] = {}  # (space rule, the values it reads) -> failure
        self._invalid: dict[str, list[dict[str, Any]]] = {}  # per backend, as the space
        self._point_verdicts: dict[tuple[Any, ...], bool] = {}  # (point rule, the values it reads) -> holds

    # -- identity ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def phase(self) -> str:
        return self.manifest.phase

    @property
    def ref(self) -> str:
        """``name@version-prefix``: what a sweep may write to pin this exact package."""
        return f"{self.name}@{self.version[:12]}"

    @property
    def param_names(self) -> list[str]:
        return list(self.manifest.params)

    # -- the variant space -------------------------------------------------------

    @cached_property
    def _space_rules(self) -> list[tuple[str, Any]]:
        allowed = set(self.manifest.params) | {"backend"}
        return [
            (rule, parse(rule)) for rule in self.manifest.restrictions.rules if parse(rule).names <= allowed
        ]

    @cached_property
    def _rule_reads(self) -> list[tuple[str, ...]]:
        """The names each space rule reads, in a fixed order (its verdicts' memo key)."""
        return [tuple(sorted(expression.names)) for _, expression in self._space_rules]

    @cached_property
    def _point_rules(self) -> list[tuple[str, Any]]:
        space = {rule for rule, _ in self._space_rules}
        return [(rule, parse(rule)) for rule in self.manifest.restrictions.rules if rule not in space]

    def variant_name(self, params: Mapping[str, int]) -> str:
        return self.manifest.variant.name.format(**params)

    def failed_rules(self, params: Mapping[str, int], backend: str) -> list[str]:
        """The space-level restrictions a point breaks (for ``backend``)."""
        if backend not in BACKEND_SOURCE_KEYS:
            raise InvalidVariant(
                f"no space for backend {backend!r} (known: {', '.join(BACKEND_SOURCE_KEYS)})"
            )
        bindings: dict[str, Value] = {**params, "backend": backend}
        verdicts = (self._verdict(i, rule, e, bindings) for i, (rule, e) in enumerate(self._space_rules))
        return [verdict for verdict in verdicts if verdict is not None]

    def _verdict(
        self, position: int, rule: str, expression: Any, bindings: Mapping[str, Value]
    ) -> str | None:
        """Space rule ``position``'s failure at these bindings (None: it holds). A rule reads a few of a
        point's values, so its verdict is memoised on those: a space walk asks about every point."""
        key = (position, *[bindings.get(name, _UNBOUND) for name in self._rule_reads[position]])
        verdict = self._rule_verdicts.get(key, _UNBOUND)
        if verdict is _UNBOUND:
            broken = _broken([(rule, expression)], bindings)
            verdict = self._rule_verdicts[key] = broken[0] if broken else None
        return verdict  # type: ignore[no-any-return]

    def all_points(self) -> list[dict[str, int]]:
        names = self.param_names
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*self.manifest.params.values())
        ]

    def all_names(self) -> list[str]:
        """The name of every point of the parameter space, restrictions not applied."""
        return [self.variant_name(params) for params in self.all_points()]

    def space(self, backend: str) -> list[Variant]:
        """Every valid point for a backend, in declared order (earlier values of earlier params first)."""
        return list(self._space_by_name(backend).values())

    def _space_by_name(self, backend: str) -> dict[str, Variant]:
        """The space, computed once per backend (parse() needs it per name: each task parses its variants)."""
        cached = self._spaces.get(backend)
        if cached is None:
            cached = {}
            for params, broken in self._walk(backend, prune=True):
                if broken is None:
                    name = self.variant_name(params)
                    cached[name] = Variant(self.name, name, params, order=len(cached))
            self._spaces[backend] = cached
        return cached

    def invalid_points(self, backend: str) -> list[dict[str, Any]]:
        """Points a restriction removes, each with the first rule it breaks (the upload answer lists them)."""
        cached = self._invalid.get(backend)
        if cached is None:
            cached = [
                {"point": self.variant_name(params), "rule": broken}
                for params, broken in self._walk(backend, prune=False)
                if broken is not None
            ]
            self._invalid[backend] = cached
        return [dict(item) for item in cached]

    def _walk(self, backend: str, prune: bool) -> list[tuple[dict[str, int], str | None]]:
        """Every point of the parameter product in declared order (earlier values of earlier params first),
        with the first space rule it breaks (None: valid); ``prune`` drops the points below a broken rule.

        A backtracking walk: the parameters most rules read are bound first and each rule is checked once, as
        soon as the values it reads are bound, for every point below that prefix (tb-decode: 19200 points, ~40
        rules; evaluating every rule at every point took seconds per backend, past HTTP clients' timeouts).
        """
        self.failed_rules({}, backend)  # an unknown backend raises here, with the known ones named
        declared = self.param_names
        if not declared:
            return []
        reads = {name: sum(name in e.names for _, e in self._space_rules) for name in declared}
        order = sorted(declared, key=lambda name: -reads[name])  # stable: ties keep the declared order
        depth_of = {name: depth for depth, name in enumerate(order)}
        due: list[list[tuple[int, str, Any]]] = [[] for _ in order]  # (manifest position, rule, expression)
        for position, (rule, expression) in enumerate(self._space_rules):
            depth = max((depth_of[n] for n in expression.names if n in depth_of), default=0)
            due[depth].append((position, rule, expression))
        choices = [list(enumerate(self.manifest.params[name])) for name in order]
        found: list[tuple[tuple[int, ...], dict[str, int], str | None]] = []
        bound: dict[str, Value] = {"backend": backend}
        index: dict[str, int] = {}

        def walk(depth: int, first: tuple[int, str] | None) -> None:
            name = order[depth]
            for position, value in choices[depth]:
                bound[name], index[name] = value, position
                here = first
                for rule_position, rule, expression in due[depth]:
                    if here is not None and rule_position > here[0]:
                        break  # an earlier rule is broken already: it is the one reported
                    broken = self._verdict(rule_position, rule, expression, bound)
                    if broken is not None:
                        here = (rule_position, broken)
                        break
                if here is not None and prune:
                    continue
                if depth + 1 < len(order):
                    walk(depth + 1, here)
                else:
                    params = {n: self.manifest.params[n][index[n]] for n in declared}
                    found.append(
                        (tuple(index[n] for n in declared), params, None if here is None else here[1])
                    )
            del bound[name], index[name]

        walk(0, None)
        found.sort(key=lambda item: item[0])
        return [(params, broken) for _, params, broken in found]

    def _name_params(self, name: str) -> dict[str, int] | None:
        """The parameters a name spells by the variant template (None when it does not match)."""
        match = _template_regex(self.manifest.variant.name, self.param_names).match(name)
        return None if match is None else {p: int(match.group(p)) for p in self.param_names}

    def is_variant_name(self, name: str) -> bool:
        """True when ``name`` is the canonical name of a point of the parameter space (any backend)."""
        params = self._name_params(name)
        if params is None:
            return False
        in_space = all(value in self.manifest.params[p] for p, value in params.items())
        return in_space and self.variant_name(params) == name

    def parse(self, name: str, backend: str) -> Variant:
        """A variant by canonical name; InvalidVariant names the template or the broken rule."""
        params = self._name_params(name)
        if params is None:
            example = self.variant_name({p: values[0] for p, values in self.manifest.params.items()})
            raise InvalidVariant(
                f"{name!r} is not a {self.name} variant name; expected {self.manifest.variant.name}, "
                f"e.g. {example}"
            )
        canonical = self.variant_name(params)
        if canonical != name:
            raise InvalidVariant(f"{name!r} is not canonical; write {canonical}")
        for p, value in params.items():
            if value not in self.manifest.params[p]:
                allowed = ",".join(map(str, self.manifest.params[p]))
                raise InvalidVariant(f"{name}: {p} must be one of {allowed}")
        failed = self.failed_rules(params, backend)
        if failed:
            raise InvalidVariant(f"{name}: breaks restriction(s) for {backend}: " + "; ".join(failed))
        variant = self._space_by_name(backend).get(name)
        if variant is None:  # unreachable: rules decide membership
            raise InvalidVariant(f"{name}: not in the {backend} space")
        return variant

    # -- per point ---------------------------------------------------------------

    def bindings(
        self, variant: Variant, n: int, k: int, m: int, fmt: QuantFormat, device: DeviceFacts
    ) -> dict[str, Value]:
        """Every name a launch, size or point-rule expression may read, derived values included."""
        values: dict[str, Value] = {
            **variant.params,
            "n": n,
            "k": k,
            "m": m,
            "format": fmt.name,
            "block_weights": fmt.block_weights,
            "block_bytes": fmt.block_bytes,
            "row_bytes": k // fmt.block_weights * fmt.block_bytes,
            **device.bindings(),
        }
        for name, source in self.manifest.derived.items():
            values[name] = parse(source).evaluate(values)
        return values

    def point_problems(self, bindings: Mapping[str, Value]) -> list[str]:
        """Restrictions over n, k, m or the device that this point breaks."""
        return _broken(self._point_rules, bindings)

    @cached_property
    def _point_rule_reads(self) -> list[tuple[str, ...]]:
        """Per point rule, the names it reads through the derived values down to what bindings() starts
        from (params, n, k, m, the format's and the device's values): its verdicts' memo key."""
        derived = {name: parse(source).names for name, source in self.manifest.derived.items()}

        def base(names: frozenset[str], seen: frozenset[str] = frozenset()) -> set[str]:
            out = set(names - derived.keys())
            for name in names & derived.keys() - seen:
                out |= base(derived[name], seen | {name})
            return out

        return [tuple(sorted(base(expression.names))) for _, expression in self._point_rules]

    def point_holds(
        self, variant: Variant, n: int, k: int, m: int, fmt: QuantFormat, device: DeviceFacts
    ) -> bool:
        """``not point_problems(bindings(...))``, with each rule's verdict memoised on the values it reads:
        a table's validity grid asks about every variant at hundreds of (M, N, K) where a rule reads a few
        of them (bindings() evaluates every derived value: ~0.5 ms a point)."""
        start: dict[str, Value] = {
            **variant.params, "n": n, "k": k, "m": m, "format": fmt.name,
            "block_weights": fmt.block_weights, "block_bytes": fmt.block_bytes,
            "row_bytes": k // fmt.block_weights * fmt.block_bytes, **device.bindings(),
        }  # fmt: skip
        full: dict[str, Value] | None = None
        for i, reads in enumerate(self._point_rule_reads):
            key = (i, *[start.get(name, _UNBOUND) for name in reads])
            holds = self._point_verdicts.get(key)
            if holds is None:
                full = full or self.bindings(variant, n, k, m, fmt, device)
                holds = self._point_verdicts[key] = not _broken([self._point_rules[i]], full)
            if not holds:
                return False
        return True

    def geometry(self, bindings: Mapping[str, Value]) -> Geometry:
        launch = self.manifest.launch
        grid = tuple(parse(s).evaluate_int(bindings) for s in launch.grid)
        block = tuple(parse(s).evaluate_int(bindings) for s in launch.block)
        shared = parse(launch.shared_bytes).evaluate_int(bindings)
        if min(grid) < 1 or min(block) < 1 or shared < 0:
            raise ExpressionError(
                f"launch geometry grid={grid} block={block} shared={shared} is not positive"
            )
        return Geometry(grid, block, shared, dict(bindings))  # type: ignore[arg-type]

    def prelaunch_for(self, backend: str) -> PrelaunchSection | None:
        """The kernel launched before every launch of a variant on ``backend`` (None: there is none)."""
        pre = self.manifest.prelaunch
        if pre is None or (pre.backends and backend not in pre.backends):
            return None
        return pre

    def has_prelaunch(self, variant: Variant, backend: str) -> bool:
        """Whether ``variant`` is launched after the prelaunch kernel on ``backend`` (its ``when``)."""
        pre = self.prelaunch_for(backend)
        return pre is not None and bool(parse(pre.when).evaluate(dict(variant.params)))

    def prelaunch_overlaps(self, backend: str) -> bool:
        """Whether the variant may start while the prelaunch kernel runs (``overlap``; CUDA only)."""
        pre = self.prelaunch_for(backend)
        return pre is not None and pre.overlap and backend == "cuda"

    def prelaunch_symbol(self, variant: Variant) -> str:
        pre = self.manifest.prelaunch
        if pre is None:
            raise ValueError(f"package {self.name} has no [prelaunch] kernel")
        return pre.symbol.format(**variant.params)

    def prelaunch_geometry(self, bindings: Mapping[str, Value]) -> Geometry:
        """Launch geometry of the prelaunch kernel at a point (same names as ``[launch]``)."""
        pre = self.manifest.prelaunch
        if pre is None:
            raise ValueError(f"package {self.name} has no [prelaunch] kernel")
        grid = tuple(parse(s).evaluate_int(bindings) for s in pre.grid)
        block = tuple(parse(s).evaluate_int(bindings) for s in pre.block)
        shared = parse(pre.shared_bytes).evaluate_int(bindings)
        if min(grid) < 1 or min(block) < 1 or shared < 0:
            raise ExpressionError(
                f"prelaunch geometry grid={grid} block={block} shared={shared} is not positive"
            )
        return Geometry(grid, block, shared, dict(bindings))  # type: ignore[arg-type]

    def args_for(self, backend: str) -> list[ArgSpec]:
        """The kernel arguments in order (host sources may take a shorter list: ``backends`` filter)."""
        return [arg for arg in self.manifest.args if not arg.backends or backend in arg.backends]

    # -- sources and symbols -----------------------------------------------------

    def source_key(self, backend: str) -> str | None:
        for key in BACKEND_SOURCE_KEYS.get(backend, ()):
            if key in self.manifest.sources:
                return key
        return None

    def sources(self, backend: str) -> list[Path]:
        key = self.source_key(backend)
        return [] if key is None else [self.root / name for name in self.manifest.sources[key]]

    def symbol(self, variant: Variant) -> str:
        return self.manifest.variant.symbol.format(**variant.params)

    def instantiation(self, variant: Variant) -> str | None:
        template = self.manifest.variant.instantiate
        return None if template is None else template.format(**variant.params)

    def describe(self) -> dict[str, Any]:
        """What /v1/families and `tunebase families` show: parameters with their meaning."""
        m = self.manifest
        return {
            "name": self.name,
            "version": self.version,
            "ref": self.ref,
            "phase": self.phase,
            "builtin": self.builtin,
            "description": m.description,
            "formats": list(m.formats),
            "weights": m.weights,
            "backends": sorted(b for b in BACKEND_SOURCE_KEYS if self.source_key(b)),
            "variant_name": m.variant.name,
            "params": [
                {"name": p, "values": list(values), "meaning": m.params_doc.get(p, "")}
                for p, values in m.params.items()
            ],
            "restrictions": list(m.restrictions.rules),
            "table": None if m.table is None else {"struct": m.table.struct, "fields": list(m.table.fields)},
            "prelaunch": None if m.prelaunch is None else {
                "symbol": m.prelaunch.symbol, "backends": list(m.prelaunch.backends) or "all",
                "when": m.prelaunch.when, "overlap": m.prelaunch.overlap,
            },
        }  # fmt: skip


POINT_NAMES = PROBLEM_NAMES | DEVICE_NAMES | FORMAT_NAMES
