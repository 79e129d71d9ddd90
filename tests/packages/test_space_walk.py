"""The space walk (KernelPackage.space: backtracking, each rule checked once the values it reads are bound)
gives exactly the points the definition does: every point of the parameter product, in declared order, that
breaks no space rule (KernelPackage.failed_rules)."""

from __future__ import annotations

import pytest

from kernels.packages.loader import builtin_packages
from kernels.packages.package import InvalidVariant

PACKAGES = builtin_packages()


@pytest.mark.parametrize("backend", ["cuda", "rocm", "host"])
@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_walk_is_the_definition(package: str, backend: str) -> None:
    pkg = PACKAGES[package]
    walked = pkg.space(backend)
    defined = [pkg.variant_name(p) for p in pkg.all_points() if not pkg.failed_rules(p, backend)]
    assert [v.name for v in walked] == defined and defined
    assert [v.order for v in walked] == list(range(len(walked)))
    assert all(pkg.variant_name(v.params) == v.name for v in walked)


def test_an_unknown_backend_is_refused_by_name() -> None:
    with pytest.raises(InvalidVariant, match="no space for backend 'metal'"):
        PACKAGES["tb-decode"].space("metal")


@pytest.mark.parametrize("backend", ["cuda", "rocm"])
@pytest.mark.parametrize("package", ["tb-decode", "tb-prefill"])
def test_invalid_points_name_the_first_broken_rule(package: str, backend: str) -> None:
    pkg = PACKAGES[package]
    defined = []
    for params in pkg.all_points():
        failed = pkg.failed_rules(params, backend)
        if failed:
            defined.append({"point": pkg.variant_name(params), "rule": failed[0]})
    assert pkg.invalid_points(backend) == defined
    assert len(defined) + len(pkg.space(backend)) == len(pkg.all_points())


@pytest.mark.parametrize("package", ["tb-decode", "tb-prefill"])
def test_memoised_point_verdicts_are_the_definition(package: str) -> None:
    """point_holds (each point rule memoised on the values it reads, derived ones traced to their inputs)
    answers as point_problems over fully evaluated bindings, point for point, failing ones included."""
    import itertools

    from kernels.formats.registry import FORMATS
    from kernels.packages.package import DeviceFacts

    pkg = PACKAGES[package]
    facts = DeviceFacts("cuda", "sm_90", 132, 32)
    variants = pkg.space("cuda")[::7]
    formats = [FORMATS[f] for f in pkg.manifest.formats][:4]
    failing = 0
    for v, fmt, m, n, k in itertools.product(
        variants, formats, (1, 3, 4, 64, 2048), (256, 4096, 24576), (1024, 5120, 16384, 53248)
    ):
        defined = not pkg.point_problems(pkg.bindings(v, n, k, m, fmt, facts))
        assert pkg.point_holds(v, n, k, m, fmt, facts) == defined, (v.name, fmt.name, m, n, k)
        failing += not defined
    assert failing  # the grid reaches points the restrictions rule out
