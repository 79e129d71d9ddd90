"""Registry routes (DESIGN §7): the GGUF formats and the kernel families with their spaces."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from kernels.families import FAMILIES
from kernels.families import decode as decode_family
from kernels.families import prefill as prefill_family
from kernels.formats.packing import EXACT, FIRST_WAVE, PACKABLE, format_kind
from kernels.formats.registry import FORMATS, codebook_name
from service.api.deps import Caller, PageParams, page_params, require_scope
from service.api.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1", tags=["registry"], responses=ERROR_RESPONSES)

BACKENDS: tuple[str, ...] = ("rocm", "cuda", "host")


def format_items() -> list[dict[str, Any]]:
    items = []
    for f in FORMATS.values():
        kind = format_kind(f.name) if f.name in PACKABLE else None
        items.append(
            {
                "name": f.name,
                "codebook": f.codebook,
                "codebook_name": codebook_name(f.codebook),
                "block_weights": f.block_weights,
                "block_bytes": f.block_bytes,
                "bits_per_weight": f.bits_per_weight,
                "first_wave": f.name in FIRST_WAVE,
                # kernel layout: None when no packer exists yet (no kernel can run the format)
                "kernel_kind": kind.name if kind else None,
                "asymmetric": kind.asymmetric if kind else None,
                "scale_group": kind.group if kind else None,
                "packing_exact": (f.name in EXACT) if kind else None,
            }
        )
    return items


def _axes(family: str, backend: str) -> dict[str, list[int]]:
    if family == "decode":
        kbs, tws = decode_family._axes(backend)
        return {"kb": list(kbs), "tw": list(tws)}
    return {name: list(values) for name, values in prefill_family._axes(backend).items()}


def _constraints(family: str, backend: str) -> list[str]:
    if family == "decode":
        return [c.reason for c in decode_family.constraints(backend)]
    return [c.reason for c in prefill_family.constraints(backend)]


def family_items() -> list[dict[str, Any]]:
    items = []
    for name, family in FAMILIES.items():
        spaces = {}
        for backend in BACKENDS:
            space = family.space(backend)
            spaces[backend] = {
                "axes": _axes(name, backend),
                "constraints": _constraints(name, backend),
                "variants": [{"name": v.name, "params": dict(v.params), "order": v.order} for v in space],
                "count": len(space),
            }
        items.append({"name": name, "phase": family.phase, "backends": spaces})
    return items


@router.get("/formats")
def list_formats(
    page: PageParams = Depends(page_params), _caller: Caller = Depends(require_scope("read"))
) -> dict[str, Any]:
    """Every known GGUF format with its codebook id, block geometry and kernel layout."""
    items = format_items()
    return {
        "total": len(items),
        "limit": page.limit,
        "offset": page.offset,
        "items": items[page.offset : page.offset + page.limit],
    }


@router.get("/families")
def list_families(_caller: Caller = Depends(require_scope("read"))) -> dict[str, Any]:
    """Kernel families with each backend's axes, declared constraints and valid variants."""
    items = family_items()
    return {"total": len(items), "items": items}
