"""Shape profiles (DESIGN §4): the inventories a sweep can name instead of listing shapes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from kernels.profiles import load_profiles
from service.api.deps import Caller, PageParams, page_params, require_scope
from service.api.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/profiles", tags=["registry"], responses=ERROR_RESPONSES)


def profile_items() -> list[dict[str, Any]]:
    return [
        {"name": name, "shapes": [{"name": s.name, "n": s.n, "k": s.k} for s in shapes]}
        for name, shapes in sorted(load_profiles().items())
    ]


@router.get("")
def list_profiles(
    page: PageParams = Depends(page_params), _caller: Caller = Depends(require_scope("read"))
) -> dict[str, Any]:
    items = profile_items()
    return {
        "total": len(items),
        "limit": page.limit,
        "offset": page.offset,
        "items": items[page.offset : page.offset + page.limit],
    }
