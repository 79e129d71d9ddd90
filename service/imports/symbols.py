"""Kernel names in a profiler capture matched to the variants whose exported symbol they are."""

from __future__ import annotations

import re
from functools import lru_cache

from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages


@lru_cache(maxsize=1)
def variant_symbols() -> dict[str, tuple[str, str]]:
    """Exported symbol -> (package, variant) over the built-in packages' GPU spaces."""
    found: dict[str, tuple[str, str]] = {}
    for name, package in builtin_packages().items():
        for backend in ("rocm", "cuda"):
            if package.source_key(backend) is None:
                continue
            for variant in package.space(backend):
                found.setdefault(package.symbol(variant), (name, variant.name))
    return found


def kernel_symbol(name: str) -> str:
    """The bare symbol of a profiler's kernel name: no argument list, '.kd' suffix or clone note."""
    bare = re.sub(r"\s*\[clone [^\]]*\]", "", name).strip()
    bare = bare.split("(", 1)[0].strip()
    bare = bare.removesuffix(".kd")
    return bare.rsplit(" ", 1)[-1]  # 'void tb_x' -> 'tb_x'


# Per-format builds name the format between family and parameters: tb_decode_q4_0_mx4_kb1_rw2_u4_rg1_pg0_pp0
# (tb-decode's symbols start with mx, the older KB/TW decode's with kb, tb-prefill's with n).
_FORMAT_INFIX = re.compile(
    r"^tb_(?P<family>decode|prefill)_(?P<format>[a-z0-9_]+?)_(?P<rest>(?:kb|n|mx)\d.*)$"
)


def match_variant(kernel: str) -> dict[str, str | None] | None:
    """{"package", "variant", "format"} when the kernel is one of Tunebase's variant symbols, else None.

    The format is known only when the symbol carries it (per-format builds); otherwise it is None.
    """
    bare = kernel_symbol(kernel)
    hit = variant_symbols().get(bare)
    if hit is not None:
        return {"package": hit[0], "variant": hit[1], "format": None}
    infix = _FORMAT_INFIX.match(bare)
    if infix is None:
        return None
    hit = variant_symbols().get(f"tb_{infix['family']}_{infix['rest']}")  # the package's own symbol
    known = {name.lower(): name for name in FORMATS}
    if hit is None or infix["format"] not in known:
        return None
    return {"package": hit[0], "variant": hit[1], "format": known[infix["format"]]}
