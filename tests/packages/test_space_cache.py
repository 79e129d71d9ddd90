"""parse() must not walk the whole space per name: a task parses each of its variants (the runner, then the
store), and a walk evaluates every restriction at every point — on the H200 stack that was most of a task's
~12 s (104 tb-decode parses: 49.7 s before the cache, 0.37 s after, on the 2-core dev VM)."""

from __future__ import annotations

import pytest

from kernels.packages.loader import LIBRARY, load_folder
from kernels.packages.package import InvalidVariant


def test_parsing_every_variant_walks_the_space_once(monkeypatch: pytest.MonkeyPatch) -> None:
    package = load_folder(LIBRARY / "tb-decode", builtin=True)
    points = len(package.all_points())
    names = [v.name for v in load_folder(LIBRARY / "tb-decode", builtin=True).space("cuda")]
    calls = 0
    real = package.failed_rules

    def counting(params: dict[str, int], backend: str) -> list[str]:
        nonlocal calls
        calls += 1
        return real(params, backend)

    monkeypatch.setattr(package, "failed_rules", counting)
    parsed = [package.parse(name, "cuda") for name in names]
    assert [v.name for v in parsed] == names and [v.order for v in parsed] == list(range(len(names)))
    assert calls <= points + len(names)  # one walk, then one check per name
    calls = 0
    assert [v.name for v in package.space("cuda")] == names and calls == 0  # the walk is kept


def test_the_cached_space_still_refuses_what_its_rules_refuse() -> None:
    package = load_folder(LIBRARY / "tb-decode", builtin=True)
    package.space("cuda")
    outside = {v.name for v in package.space("cuda")} - {v.name for v in package.space("rocm")}
    assert outside  # the ring variants are CUDA-only
    with pytest.raises(InvalidVariant, match="restriction"):
        package.parse(sorted(outside)[0], "rocm")
    with pytest.raises(InvalidVariant):
        package.space("no-such-backend")
