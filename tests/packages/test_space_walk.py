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
