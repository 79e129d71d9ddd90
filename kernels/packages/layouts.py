"""Built-in weight layouts a package may read (manifest key ``weights``).

A layout turns the GGUF blocks of one problem into the host arrays a kernel's ``weights`` arguments point
at, and supplies the per-format defines the source is compiled with. ``gguf`` is the format's real bytes,
exactly as stored in a .gguf file (rows of N, blocks along K). ``tb-split`` is the same bytes repacked
into per-row payload / high-bit / scale arrays so payload loads are 16-byte aligned and coalesced
(kernels/formats/split.py); the built-in kernels read it. ``tb-packed`` is the int8-expanded layout of
the original built-in kernels (kernels/formats/packed.py); it moves about twice a 4-bit format's bytes,
which ``bits_per_weight`` makes visible wherever bandwidth is reported (DESIGN §10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kernels.formats.packing import PACKABLE, format_kind
from kernels.formats.registry import QuantFormat, get_format
from kernels.formats.split import SPLITTABLE, split_blocks, split_defines
from kernels.reference import Problem


class Layout(Protocol):
    name: str
    parts: tuple[str, ...]  # the arrays, in the order a manifest's weights args default to

    def supports(self, fmt: QuantFormat) -> str | None:
        """None when the layout can carry the format, else why not."""
        ...

    def arrays(self, problem: Problem) -> dict[str, np.ndarray | None]:
        """Host arrays per part (None = a null pointer, e.g. no min term)."""
        ...

    def defines(self, fmt: QuantFormat) -> dict[str, str]: ...

    def bits_per_weight(self, fmt: QuantFormat) -> float: ...


def format_defines(fmt: QuantFormat) -> dict[str, str]:
    """Defines every package source gets: which format, and its block geometry."""
    return {
        f"TB_FMT_{fmt.name}": "1",
        "TB_CODEBOOK": str(fmt.codebook),
        "TB_BLOCK_WEIGHTS": str(fmt.block_weights),
        "TB_BLOCK_BYTES": str(fmt.block_bytes),
    }


@dataclass
class GgufBlocks:
    """The format's blocks exactly as stored: uint8 [N][K / block_weights * block_bytes]."""

    name: str = "gguf"
    parts: tuple[str, ...] = ("blocks",)

    def supports(self, fmt: QuantFormat) -> str | None:
        return None

    def arrays(self, problem: Problem) -> dict[str, np.ndarray | None]:
        return {"blocks": np.ascontiguousarray(problem.weights)}

    def defines(self, fmt: QuantFormat) -> dict[str, str]:
        return format_defines(fmt)

    def bits_per_weight(self, fmt: QuantFormat) -> float:
        return fmt.bits_per_weight


@dataclass
class TbPacked:
    """int8 values + fp16 scales (+ fp16 mins): one source serves every packable format."""

    name: str = "tb-packed"
    parts: tuple[str, ...] = ("qs", "scales", "mins")

    def supports(self, fmt: QuantFormat) -> str | None:
        if fmt.name not in PACKABLE:
            return f"layout tb-packed has no packing for {fmt.name} (packable: {', '.join(PACKABLE)})"
        return None

    def arrays(self, problem: Problem) -> dict[str, np.ndarray | None]:
        packed = problem.packed
        if packed is None:
            raise ValueError(f"{problem.format.name}: the problem was built without the packed layout")
        mins = None if packed.mins is None else packed.mins.view(np.uint16)
        return {"qs": packed.qs, "scales": packed.scales.view(np.uint16), "mins": mins}

    def defines(self, fmt: QuantFormat) -> dict[str, str]:
        """Only the kind's switches: formats of one kind share one compiled unit (the arrays are alike)."""
        return dict(format_kind(fmt.name).defines)

    def bits_per_weight(self, fmt: QuantFormat) -> float:
        group = format_kind(fmt.name).group
        scale_bits = 16 * (2 if format_kind(fmt.name).asymmetric else 1)
        return 8 + scale_bits / group


@dataclass
class TbSplit:
    """The GGUF bytes split per row into payload ``qs``, high bits ``qh`` and the rest ``sc`` (same size)."""

    name: str = "tb-split"
    parts: tuple[str, ...] = ("qs", "qh", "sc")

    def supports(self, fmt: QuantFormat) -> str | None:
        if fmt.name not in SPLITTABLE:
            return f"layout tb-split has no split for {fmt.name} (splittable: {', '.join(SPLITTABLE)})"
        return None

    def arrays(self, problem: Problem) -> dict[str, np.ndarray | None]:
        return split_blocks(problem.format, problem.weights)

    def defines(self, fmt: QuantFormat) -> dict[str, str]:
        """One compiled unit per format: the format switch plus each part's bytes per block."""
        return {**format_defines(fmt), **split_defines(fmt)}

    def bits_per_weight(self, fmt: QuantFormat) -> float:
        return fmt.bits_per_weight  # a same-size repack: the format's true bits


_BUILT_IN: tuple[Layout, ...] = (GgufBlocks(), TbSplit(), TbPacked())
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in _BUILT_IN}


def layout_for(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise KeyError(f"unknown weight layout {name!r}; known: {', '.join(LAYOUTS)}") from None


def needs_packing(layout_name: str) -> bool:
    return layout_name == "tb-packed"


def check_format(layout_name: str, format_name: str) -> str | None:
    """None when ``format_name`` can be laid out for this package, else why not."""
    if layout_name == "prepare":
        return None
    return layout_for(layout_name).supports(get_format(format_name))
