"""One arch table: adding a row is all it takes for spec validation, queues and compiler choice to know it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from pydantic import ValidationError

from kernels import arches
from kernels.arches import ARCHES, Arch
from service.sweeps.spec import SweepSpec
from workers import celery_app
from workers.backends.registry import backend_name_for_arch
from workers.compilers import HipccCompiler, ZigClangCompiler, compiler_for_arch

SPEC = {"phase": "decode", "formats": ["Q8_0"], "shapes": [{"name": "S", "n": 64, "k": 64}], "m": [1]}


@pytest.fixture
def new_row(monkeypatch: pytest.MonkeyPatch) -> Iterator[Arch]:
    """gfx1100 (a hypothetical new RDNA target) as one more row, built by the zig clang driver."""
    row = replace(ARCHES["gfx942"], name="gfx1100", label="new GPU", cus=96)
    monkeypatch.setitem(ARCHES, "gfx1100", row)
    monkeypatch.setattr(arches, "ARCH_NAMES", (*arches.ARCH_NAMES, "gfx1100"))
    yield row


def test_a_new_row_reaches_validation_queues_and_compilers(new_row: Arch) -> None:
    with pytest.raises(ValidationError, match="unknown arch 'gfx1200'"):
        SweepSpec.model_validate({**SPEC, "arch": "gfx1200"})
    spec = SweepSpec.model_validate({**SPEC, "arch": "gfx1100"})
    assert spec.arch == "gfx1100"
    assert backend_name_for_arch("gfx1100") == "rocm"
    assert celery_app.arch_queue("gfx1100") == "arch.gfx1100"
    assert isinstance(compiler_for_arch("gfx1100"), ZigClangCompiler)
    assert "gfx1100" in arches.arches_for_backend("rocm")
    assert "gfx1100" in arches.arches_for_compiler("zig-clang")


def test_every_list_derives_from_the_table() -> None:
    assert set(celery_app.ARCHES) == set(ARCHES)
    assert HipccCompiler.arches == {a for a, row in ARCHES.items() if row.compiler == "hipcc"}
    assert ZigClangCompiler.arches == {a for a, row in ARCHES.items() if row.compiler == "zig-clang"}
    for name, row in ARCHES.items():
        assert backend_name_for_arch(name) == row.backend
        assert row.queue == f"arch.{name}"
    schema = SweepSpec.model_json_schema()["properties"]["arch"]
    assert schema["enum"] == list(ARCHES)
