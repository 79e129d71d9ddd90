"""The dashboard at `/`: server-rendered HTML + inline SVG from the server's own DB session.

Access: with `dashboard_public` (default) it needs no token, since it only reads and shows what the read API
shows; set TUNEBASE_DASHBOARD_PUBLIC=false to require the `read` scope like the API (a bearer token,
e.g. injected by an auth proxy, or `anonymous_read`).
"""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from service.api.deps import MAX_ID, Caller, bearer, get_session, require_scope
from service.config import Settings
from service.dashboard import data
from service.dashboard.svg import color_map, fmt_us, value_axis
from service.text import storable, text_problem

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(FsPath(__file__).with_name("templates")))
templates.env.filters["us"] = fmt_us


def _renderable(value: Any) -> Any:
    """Every {{ }} output passes here: text stored before input was validated still renders."""
    return storable(value) if isinstance(value, str) and text_problem(value) else value


templates.env.finalize = _renderable

CELL_W, CELL_H, LABEL_W, HEAD_H = 64, 24, 250, 28
ROW_H, BOX_LABEL_W, PLOT_W = 30, 150, 620


def dashboard_reader(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    session: Session = Depends(get_session),
) -> Caller:
    settings: Settings = request.app.state.settings
    if settings.dashboard_public:
        return Caller(name="dashboard", scopes=frozenset({"read"}))
    return require_scope("read")(request, credentials, session)


def _point_href(
    arch: str, phase: str, format_name: str, m: int, n: int, k: int, kernel: str | None = None
) -> str:
    params = {"arch": arch, "phase": phase, "format": format_name, "m": m, "n": n, "k": k}
    query = urlencode({**params, **({"kernel": kernel} if kernel else {})})
    return f"/dashboard/point?{query}"


def heatmap_view(heatmap: data.Heatmap, colors: dict[str, str]) -> dict[str, Any]:
    cells, voids = [], []
    for row, (name, n, k) in enumerate(heatmap.shapes):
        for col, m in enumerate(heatmap.ms):
            x, y = LABEL_W + col * CELL_W, HEAD_H + row * CELL_H
            winner = heatmap.cells.get((n, k, m))
            if winner is None:
                voids.append({"x": x, "y": y})
                continue
            margin = f"{100 * winner.margin:.1f}%" if winner.margin is not None else "n/a"
            cells.append(
                {
                    "x": x,
                    "y": y,
                    "color": colors[winner.variant],
                    "variant": winner.variant,
                    "decided": winner.decided,
                    "m": m,
                    "shape": name,
                    "title": f"{name} {n}x{k} M={m}: {winner.variant} {fmt_us(winner.median_us)} µs, "
                    f"margin {margin}{'' if winner.decided else ' (tie)'}",
                    "href": _point_href(heatmap.arch, heatmap.phase, heatmap.format, m, n, k, heatmap.kernel),
                }
            )
    return {
        "arch": heatmap.arch,
        "phase": heatmap.phase,
        "format": heatmap.format,
        "kernel": heatmap.kernel,
        "width": LABEL_W + max(len(heatmap.ms), 1) * CELL_W + 10,
        "height": HEAD_H + max(len(heatmap.shapes), 1) * CELL_H + 6,
        "rows": [
            {"label": f"{name} {n}x{k}", "y": HEAD_H + i * CELL_H + CELL_H / 2 + 4}
            for i, (name, n, k) in enumerate(heatmap.shapes)
        ],
        "cols": [
            {"label": f"M={m}", "x": LABEL_W + i * CELL_W + CELL_W / 2} for i, m in enumerate(heatmap.ms)
        ],
        "cells": cells,
        "voids": voids,
        "cell_w": CELL_W - 2,
        "cell_h": CELL_H - 2,
        "variants": heatmap.variants,
    }


def boxplot_view(point: data.PointDistributions, colors: dict[str, str]) -> dict[str, Any]:
    values: list[float] = []
    for s in point.series:
        if s.stats is not None:
            values += [s.stats.whisker_lo, s.stats.whisker_hi, *s.stats.outliers]
    axis = value_axis(values, BOX_LABEL_W, BOX_LABEL_W + PLOT_W)
    rows = []
    for i, s in enumerate(point.series):
        y = 10 + i * ROW_H
        row: dict[str, Any] = {
            "variant": s.variant,
            "y": y,
            "mid": y + ROW_H / 2,
            "color": colors.get(s.variant, "#777") if s.parity_pass else "#bbbbbb",
            "parity_pass": s.parity_pass,
            "is_winner": s.is_winner,
            "href": f"/dashboard/measurements/{s.measurement_id}",
            "stats": s.stats,
        }
        if s.stats is not None:
            st = s.stats
            row.update(
                q1=axis.at(st.q1),
                q3=axis.at(st.q3),
                med=axis.at(st.median),
                lo=axis.at(st.whisker_lo),
                hi=axis.at(st.whisker_hi),
                outliers=[axis.at(v) for v in st.outliers],
                title=f"{s.variant}: n={st.n} median {fmt_us(st.median)} µs, "
                f"IQR {fmt_us(st.q1)}–{fmt_us(st.q3)}",
            )
        rows.append(row)
    plot_h = 10 + len(rows) * ROW_H
    return {
        "rows": rows,
        "width": BOX_LABEL_W + PLOT_W + 30,
        "height": plot_h + 40,
        "axis_y": plot_h + 4,
        "x0": BOX_LABEL_W,
        "x1": BOX_LABEL_W + PLOT_W,
        "ticks": [{"x": axis.at(t), "label": fmt_us(t)} for t in axis.ticks],
    }


@router.get("/", response_class=HTMLResponse)
def index(
    request: Request,
    arch: str | None = Query(None, max_length=32),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    format: str | None = Query(None, max_length=16),
    kernel: str | None = Query(None, max_length=64),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    groups = data.heatmap_groups(session)
    selected = [g for g in groups if (arch is None or g.arch == arch) and (phase is None or g.phase == phase)]
    selected = [g for g in selected if (format is None or g.format == format) and kernel in (None, g.kernel)]
    maps = [data.heatmap(session, g.arch, g.phase, g.format, g.kernel) for g in selected[:12]]
    colors = color_map(v for h in maps for v in h.variants)
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "sweeps": data.recent_sweeps(session),
            "groups": groups,
            "heatmaps": [heatmap_view(h, colors) for h in maps],
            "hidden_groups": max(len(selected) - len(maps), 0),
            "legend": list(colors.items()),
            "tables": data.recent_tables(session, 5),
        },
    )


@router.get("/dashboard/point", response_class=HTMLResponse)
def point(
    request: Request,
    arch: str = Query(..., max_length=32),
    phase: str = Query(..., pattern="^(decode|prefill)$"),
    format: str = Query(..., max_length=16),
    m: int = Query(..., ge=1, le=MAX_ID),
    n: int = Query(..., ge=1, le=MAX_ID),
    k: int = Query(..., ge=1, le=MAX_ID),
    kernel: str | None = Query(None, max_length=64),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    distributions = data.point_distributions(session, arch, phase, format, m, n, k, kernel)
    if not distributions.series:
        raise HTTPException(404, f"nothing measured at {arch} {phase} {format} M={m} {n}x{k}")
    colors = color_map(s.variant for s in distributions.series)
    return templates.TemplateResponse(
        request, "point.html", {"point": distributions, "plot": boxplot_view(distributions, colors)}
    )


@router.get("/dashboard/measurements/{measurement_id}", response_class=HTMLResponse)
def measurement(
    request: Request,
    measurement_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    detail = data.measurement_detail(session, measurement_id)
    if detail is None:
        raise HTTPException(404, f"measurement {measurement_id} not found")
    return templates.TemplateResponse(request, "measurement.html", {"d": detail, "m": detail.measurement})


@router.get("/dashboard/tables", response_class=HTMLResponse)
def tables(
    request: Request, _reader: Caller = Depends(dashboard_reader), session: Session = Depends(get_session)
) -> HTMLResponse:
    versions = data.recent_tables(session)
    by_id = {v.id: v for v in versions}
    rows = []
    for version in versions:
        parent = by_id.get(version.parent_id) if version.parent_id else None
        if parent is None and version.parent_id:
            from service.db.models import TableVersion

            parent = session.get(TableVersion, version.parent_id)
        changes = data.entries_diff(parent.entries or [], version.entries or []) if parent else []
        rows.append({"v": version, "parent": parent, "changes": changes})
    return templates.TemplateResponse(request, "tables.html", {"rows": rows})
