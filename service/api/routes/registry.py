"""Registry routes (DESIGN §7): the GGUF formats and the kernel families with their spaces."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from kernels.arches import BACKENDS
from kernels.formats.packing import EXACT, FIRST_WAVE, PACKABLE, format_kind
from kernels.formats.registry import FORMATS, codebook_name
from kernels.packages.loader import builtin_packages
from kernels.packages.package import KernelPackage
from service.api.deps import Caller, PageParams, get_session, page_params, require_scope
from service.api.errors import ERROR_RESPONSES
from service.kernel_store import get_package, list_uploaded_names

router = APIRouter(prefix="/v1", tags=["registry"], responses=ERROR_RESPONSES)


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


def family_items(packages: list[KernelPackage]) -> list[dict[str, Any]]:
    """Every package with its parameters (and their meaning) and each backend's valid variants."""
    items = []
    for package in packages:
        spaces = {}
        for backend in BACKENDS:
            if package.source_key(backend) is None:
                continue
            space = package.space(backend)
            spaces[backend] = {
                "variants": [{"name": v.name, "params": dict(v.params), "order": v.order} for v in space],
                "invalid": package.invalid_points(backend),
                "count": len(space),
            }
        items.append({**package.describe(), "backends": spaces})
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
def list_families(
    _caller: Caller = Depends(require_scope("read")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Kernel packages (built-in and the newest version of each upload) with parameters and spaces."""
    packages = list(builtin_packages().values())
    packages += [get_package(session, name) for name in list_uploaded_names(session)]
    items = family_items(packages)
    return {"total": len(items), "items": items}
