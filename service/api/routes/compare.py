"""A/B of two variants on one point (DESIGN §7 ``GET /v1/compare``).

``ratio`` is median(a) / median(b) of each variant's newest measurement at the point
(the newest non-stale one when there is one), with a seeded bootstrap interval and the
dispatch counts behind it: ratio > 1 means ``a`` is slower. ``faster`` names the
variant the interval shows faster by more than ``min_effect`` (settings), else null.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session

from kernels.arches import get_arch
from kernels.families.base import InvalidVariant
from kernels.formats.registry import FORMATS
from service.api.deps import Caller, get_session, require_scope
from service.kernel_store import PackageNotFound, resolve
from service.statistics.bootstrap import estimate_median, ratio_interval, stable_seed
from service.winners import PointMeasurement, dispatch_times_us, newest_per_variant, point_measurements

router = APIRouter(prefix="/v1/compare", tags=["winners"])


def _invalid(field: str, message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("query", field), "msg": message, "type": "value_error"}])


def _side(item: PointMeasurement, times: tuple[float, ...] | None) -> dict[str, Any]:
    m = item.measurement
    return {
        "variant": item.variant.name,
        "measurement_id": m.id,
        "sweep_id": m.sweep_id,
        "median_us": float(m.median_us or 0.0),
        "n": len(times) if times else 0,
        "parity_pass": m.parity_pass,
        "stale": item.stale,
    }


@router.get("")
def compare(
    request: Request,
    arch: str = Query(..., min_length=1, max_length=32),
    phase: str = Query(..., pattern="^(decode|prefill)$"),
    format: str = Query(..., min_length=1, max_length=16),
    m: int = Query(..., ge=1),
    n: int = Query(..., ge=1),
    k: int = Query(..., ge=1),
    a: str = Query(..., min_length=1, max_length=80),
    b: str = Query(..., min_length=1, max_length=80),
    kernel: str | None = Query(None, max_length=130, description="package name; default: the built-in"),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    if format not in FORMATS:
        raise _invalid("format", f"unknown format {format!r}")
    try:
        backend = get_arch(arch).backend
    except KeyError as error:
        raise _invalid("arch", str(error.args[0])) from None
    try:
        family = resolve(session, kernel, phase)
    except PackageNotFound as error:
        raise _invalid("kernel", str(error)) from None
    for field, name in (("a", a), ("b", b)):
        try:
            family.parse(name, backend)
        except InvalidVariant as error:
            raise _invalid(field, str(error)) from None
    if a == b:
        raise _invalid("b", "a and b must name different variants")
    chosen = newest_per_variant(point_measurements(session, arch, phase, format, m, n, k, family.name))
    for name in (a, b):
        if name not in chosen:
            raise HTTPException(404, f"no measurement of {name} at {arch}/{phase}/{format} m={m} n={n} k={k}")
    side_a, side_b = chosen[a], chosen[b]
    times = dispatch_times_us(session, [side_a.measurement.id, side_b.measurement.id])
    ta, tb = times.get(side_a.measurement.id), times.get(side_b.measurement.id)
    min_effect = request.app.state.settings.min_effect
    result: dict[str, Any] = {
        "arch": arch,
        "phase": phase,
        "format": format,
        "m": m,
        "n": n,
        "k": k,
        "a": _side(side_a, ta),
        "b": _side(side_b, tb),
        "min_effect": min_effect,
    }
    if ta and tb and len(ta) >= 3 and len(tb) >= 3:
        seed = stable_seed(arch, phase, format, m, n, k)
        est_a = estimate_median(ta, stable_seed(seed, a))
        est_b = estimate_median(tb, stable_seed(seed, b))
        ratio, ci = ratio_interval(est_a, est_b)
        result["a"]["median_us"], result["b"]["median_us"] = est_a.median, est_b.median
        result["a"]["median_ci"], result["b"]["median_ci"] = list(est_a.ci), list(est_b.ci)
        faster = b if ci[0] > 1 + min_effect else a if ci[1] < 1 / (1 + min_effect) else None
        result.update(ratio=ratio, ratio_ci=list(ci), samples=est_a.n + est_b.n, faster=faster)
    else:  # imported summaries: no per-dispatch rows, so no interval
        summary_ratio = (
            result["a"]["median_us"] / result["b"]["median_us"] if result["b"]["median_us"] else None
        )
        result.update(
            ratio=summary_ratio, ratio_ci=None, samples=result["a"]["n"] + result["b"]["n"], faster=None
        )
    return result
