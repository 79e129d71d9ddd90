"""The dashboard at `/`: server-rendered HTML + inline SVG from the server's own DB session.

Access: with `dashboard_public` (default) it needs no token, since it only reads and shows what the read API
shows; set TUNEBASE_DASHBOARD_PUBLIC=false to require the `read` scope like the API. A browser signs in once
at /login with a read token (kept in an HttpOnly, SameSite=Strict cookie, honoured for reads only); a bearer
header (e.g. from an auth proxy) or `anonymous_read` work too. Every drill-down has a page here, so a
public dashboard never links a reader into a 401.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path as FsPath
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Form, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from sqlalchemy.orm import Session

from service.api.deps import (
    MAX_ID,
    SESSION_COOKIE,
    Caller,
    bearer,
    get_session,
    require_scope,
    worker_presence,
)
from service.auth import granted, lookup_token
from service.config import Settings
from service.dashboard import data
from service.dashboard.svg import (
    FAILED_COLOR,
    VOID_COLOR,
    color_map,
    fmt_pct,
    fmt_us,
    text_color,
    text_width,
    value_axis,
    variant_color,
)
from service.db.models import TableVersion
from service.imports.rocprof import capture_summary, list_captures
from service.sweeps.availability import Presence
from service.tables.diff import codebook_formats, diff_versions
from service.text import storable, text_problem

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(FsPath(__file__).with_name("templates")))
templates.env.filters["us"] = fmt_us
templates.env.filters["pct"] = fmt_pct
templates.env.globals["formats_of"] = codebook_formats


def _renderable(value: Any) -> Any:
    """Every {{ }} output passes here: text stored before input was validated still renders."""
    return storable(value) if isinstance(value, str) and text_problem(value) else value


templates.env.finalize = _renderable

CELL_H, HEAD_H = 34, 28
LOGIN_SECONDS = 12 * 3600  # a signed-in browser reads for a working day, then signs in again
ROW_H, BOX_LABEL_W, PLOT_W = 30, 150, 620


class SignInRequired(Exception):
    """A private dashboard page was asked for without a usable token: send the browser to /login."""


def dashboard_reader(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    session: Session = Depends(get_session),
) -> Caller:
    settings: Settings = request.app.state.settings
    if settings.dashboard_public:
        return Caller(name="dashboard", scopes=frozenset({"read"}))
    try:
        return require_scope("read")(request, credentials, session)
    except HTTPException as error:
        if error.status_code == 401 and credentials is None:
            raise SignInRequired() from None
        raise


def _point_href(
    arch: str, phase: str, format_name: str, m: int, n: int, k: int, kernel: str | None = None
) -> str:
    params = {"arch": arch, "phase": phase, "format": format_name, "m": m, "n": n, "k": k}
    query = urlencode({**params, **({"kernel": kernel} if kernel else {})})
    return f"/dashboard/point?{query}"


def _cell_title(name: str, n: int, k: int, m: int, w: Any) -> str:
    """Hover text: the winner's median, the runner-up's, and the margin with its interval."""
    text = f"{name} {n}x{k} M={m}: {w.variant} median {fmt_us(w.median_us)} µs"
    if w.runner_up:
        text += f"; runner-up {w.runner_up} {fmt_us(w.runner_up_median_us)} µs"
    if w.margin is not None:
        text += f"; margin {fmt_pct(w.margin)}"
        if w.margin_ci_lo is not None and w.margin_ci_hi is not None:
            text += f" [{fmt_pct(w.margin_ci_lo)}, {fmt_pct(w.margin_ci_hi)}]"
    tied = len(w.tie_group or [])
    return text + ("; decided" if w.decided else f"; statistical tie{f' of {tied}' if tied else ''}")


def heatmap_view(heatmap: data.Heatmap) -> dict[str, Any]:
    labels = [f"{name} {n}x{k}" for name, n, k in heatmap.shapes]
    label_w = max([text_width(label) for label in labels] + [60]) + 16
    cell_w = max([text_width(v, 6.2) for v in heatmap.variants] + [60]) + 12
    cells, voids = [], []
    for row, (name, n, k) in enumerate(heatmap.shapes):
        for col, m in enumerate(heatmap.ms):
            x, y = label_w + col * cell_w, HEAD_H + row * CELL_H
            winner = heatmap.cells.get((n, k, m))
            if winner is None:
                voids.append({"x": x, "y": y, "title": f"{name} {n}x{k} M={m}: not measured"})
                continue
            color = variant_color(winner.variant)
            cells.append(
                {
                    "x": x,
                    "y": y,
                    "color": color,
                    "ink": text_color(color),
                    "variant": winner.variant,
                    "median": fmt_us(winner.median_us),
                    "decided": winner.decided,
                    "m": m,
                    "shape": name,
                    "title": _cell_title(name, n, k, m, winner),
                    "href": _point_href(heatmap.arch, heatmap.phase, heatmap.format, m, n, k, heatmap.kernel),
                }
            )
    return {
        "arch": heatmap.arch,
        "phase": heatmap.phase,
        "format": heatmap.format,
        "kernel": heatmap.kernel,
        "width": label_w + max(len(heatmap.ms), 1) * cell_w + 10,
        "height": HEAD_H + max(len(heatmap.shapes), 1) * CELL_H + 6,
        "label_x": label_w - 8,
        "rows": [
            {"label": label, "y": HEAD_H + i * CELL_H + CELL_H / 2 + 4} for i, label in enumerate(labels)
        ],
        "cols": [
            {"label": f"M={m}", "x": label_w + i * cell_w + cell_w / 2} for i, m in enumerate(heatmap.ms)
        ],
        "cells": cells,
        "voids": voids,
        "cell_w": cell_w - 2,
        "cell_h": CELL_H - 2,
        "variants": heatmap.variants,
    }


def boxplot_view(point: data.PointDistributions) -> dict[str, Any]:
    values: list[float] = []
    for s in point.series:
        if s.stats is not None:
            values += [s.stats.whisker_lo, s.stats.whisker_hi, *s.stats.outliers]
    axis = value_axis(values, BOX_LABEL_W, BOX_LABEL_W + PLOT_W)
    passing = [s.median_us for s in point.series if s.parity_pass and s.median_us]
    best = min(passing) if passing else None
    rows = []
    for i, s in enumerate(point.series):
        y = 10 + i * ROW_H
        row: dict[str, Any] = {
            "variant": s.variant,
            "y": y,
            "mid": y + ROW_H / 2,
            "color": variant_color(s.variant) if s.parity_pass else FAILED_COLOR,
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
                title=f"{s.variant}: n={st.n}, median {fmt_us(st.median)} µs, "
                f"IQR {fmt_us(st.q1)}–{fmt_us(st.q3)} µs"
                + (f", {fmt_pct(s.median_us / best - 1)} over the fastest" if best and s.median_us else "")
                + ("" if s.parity_pass else ", FAILED parity (can never win)"),
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


def _legend(variants: Iterable[str], failed: bool = False) -> dict[str, Any]:
    return {"variants": list(color_map(variants).items()), "failed": failed, "void": VOID_COLOR,
            "failed_color": FAILED_COLOR}  # fmt: skip


@router.get("/", response_class=HTMLResponse)
def index(
    request: Request,
    arch: str | None = Query(None, max_length=32),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    format: str | None = Query(None, max_length=16),
    kernel: str | None = Query(None, max_length=64),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
    presence: Presence = Depends(worker_presence),
) -> HTMLResponse:
    groups = data.heatmap_groups(session)
    selected = [g for g in groups if (arch is None or g.arch == arch) and (phase is None or g.phase == phase)]
    selected = [g for g in selected if (format is None or g.format == format) and kernel in (None, g.kernel)]
    maps = [data.heatmap(session, g.arch, g.phase, g.format, g.kernel) for g in selected[:12]]
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "sweeps": data.recent_sweeps(session, presence),
            "groups": groups,
            "heatmaps": [heatmap_view(h) for h in maps],
            "hidden_groups": max(len(selected) - len(maps), 0),
            "legend": _legend(v for h in maps for v in h.variants),
            "tables": data.recent_tables(session, 5),
        },
    )


@router.get("/dashboard/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_page(
    request: Request,
    sweep_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
    presence: Presence = Depends(worker_presence),
) -> HTMLResponse:
    detail = data.sweep_detail(session, sweep_id, presence)
    if detail is None:
        raise HTTPException(404, f"sweep {sweep_id} not found")
    links = {t.id: _point_href(t.arch, t.phase, t.format, t.m, t.n, t.k, t.kernel) for t in detail.tasks}
    tasks = [{"t": t, "href": links[t.id] if t.state == "done" else None} for t in detail.tasks]
    context = {"d": detail, "s": detail.status, "tasks": tasks}
    return templates.TemplateResponse(request, "sweep.html", context)


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
    legend = _legend((s.variant for s in distributions.series), failed=True)
    return templates.TemplateResponse(
        request, "point.html", {"point": distributions, "plot": boxplot_view(distributions), "legend": legend}
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
    m = detail.measurement
    back = _point_href(m.arch, m.phase, m.format, m.m, m.n, m.k, m.kernel)
    return templates.TemplateResponse(request, "measurement.html", {"d": detail, "m": m, "back": back})


@router.get("/dashboard/measurements/{measurement_id}/dispatches.csv")
def measurement_csv(
    request: Request,
    measurement_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> StreamingResponse:
    """The same CSV as the API's, reachable from the page without a bearer header."""
    from service.api.routes.measurements import _csv_rows

    if data.measurement_detail(session, measurement_id) is None:
        raise HTTPException(404, f"measurement {measurement_id} not found")
    return StreamingResponse(
        _csv_rows(session, measurement_id),  # the request's own session: one pooled connection
        media_type="text/csv",
        headers={"Content-Disposition": f'inline; filename="measurement-{measurement_id}.csv"'},
    )


def _get_table(session: Session, table_id: int) -> TableVersion:
    version = session.get(TableVersion, table_id)
    if version is None:
        raise HTTPException(404, f"table {table_id} not found")
    return version


@router.get("/dashboard/tables", response_class=HTMLResponse)
def tables(
    request: Request, _reader: Caller = Depends(dashboard_reader), session: Session = Depends(get_session)
) -> HTMLResponse:
    rows = []
    for version in data.recent_tables(session):
        parent = session.get(TableVersion, version.parent_id) if version.parent_id else None
        diff = diff_versions(parent, version) if parent else None
        rows.append({"v": version, "parent": parent, "diff": diff})
    return templates.TemplateResponse(request, "tables.html", {"rows": rows})


@router.get("/dashboard/tables/{table_id}", response_class=HTMLResponse)
def table_page(
    request: Request,
    table_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    version = _get_table(session, table_id)
    return templates.TemplateResponse(request, "table.html", {"v": version})


@router.get("/dashboard/tables/{table_id}/inc", response_class=PlainTextResponse)
def table_inc(
    table_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> PlainTextResponse:
    return PlainTextResponse(_get_table(session, table_id).content)


@router.get("/dashboard/tables/{table_id}/diff", response_class=HTMLResponse)
def table_diff_page(
    request: Request,
    table_id: int = Path(ge=1, le=MAX_ID),
    base: int | None = Query(None, ge=1, le=MAX_ID, description="default: the version's parent"),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    head = _get_table(session, table_id)
    base_id = base if base is not None else head.parent_id
    if base_id is None:
        raise HTTPException(404, f"table {table_id} has no parent to compare with; pass ?base=ID")
    diff = diff_versions(_get_table(session, base_id), head)
    return templates.TemplateResponse(request, "diff.html", {"diff": diff, "head": head})


@router.get("/dashboard/captures", response_class=HTMLResponse)
def captures(
    request: Request,
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    page = list_captures(session, limit=100, offset=0)
    return templates.TemplateResponse(request, "captures.html", {"page": page})


@router.get("/dashboard/captures/{capture_id}", response_class=HTMLResponse)
def capture_page(
    request: Request,
    capture_id: int = Path(ge=1, le=MAX_ID),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    summary = capture_summary(session, capture_id)
    if summary is None:
        raise HTTPException(404, f"capture {capture_id} not found")
    return templates.TemplateResponse(request, "capture.html", {"c": summary})


@router.get("/dashboard/kernels", response_class=HTMLResponse)
def kernels(
    request: Request,
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    from service.kernel_catalog import kernel_summaries

    return templates.TemplateResponse(request, "kernels.html", {"packages": kernel_summaries(session)})


@router.get("/dashboard/kernels/{name}/{version}", response_class=HTMLResponse)
def kernel_isa_page(
    request: Request,
    name: str = Path(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$"),
    version: str = Path(pattern=r"^[0-9a-f]{1,64}$", description="content sha256 or a unique prefix"),
    arch: str | None = Query(None, max_length=32, pattern=r"^[a-z0-9-]+$"),
    _reader: Caller = Depends(dashboard_reader),
    session: Session = Depends(get_session),
) -> HTMLResponse:
    """The ISA panel of one package version: liveness and hot-loop analyses of every stored variant."""
    from service.kernel_catalog import kernel_summaries

    versions = [v["version"] for p in kernel_summaries(session, name) for v in p["versions"]]
    matching = [v for v in versions if v.startswith(version)]
    if len(matching) != 1:
        why = "no version" if not matching else "more than one version starting with"
        raise HTTPException(404, f"kernel package {name} has {why} {version}")
    full = matching[0]
    every = data.kernel_isa(session, name, full)
    rows = [r for r in every if arch is None or r.arch == arch]
    context = {
        "name": name,
        "version": full,
        "arch": arch,
        "archs": sorted({r.arch for r in every}),
        "rows": rows,
    }
    return templates.TemplateResponse(request, "kernel_isa.html", context)


CONCEPTS = FsPath(__file__).resolve().parents[2] / "docs" / "concepts.md"


@router.get("/dashboard/concepts", response_class=HTMLResponse)
def concepts(request: Request) -> HTMLResponse:
    """docs/concepts.md, rendered: what codebook, overlay, regret and the rest mean."""
    if not CONCEPTS.is_file():
        raise HTTPException(404, "docs/concepts.md is not installed beside this server")
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(CONCEPTS.read_text())
    html = re.sub(r"<h([23])>(.*?)</h\1>", lambda m: f'<h{m[1]} id="{_slug(m[2])}">{m[2]}</h{m[1]}>', html)
    return templates.TemplateResponse(request, "concepts.html", {"html": html})


def _slug(heading: str) -> str:
    """GitHub-style anchor of a heading, so README links like concepts.md#overlay work here too."""
    text = re.sub(r"<[^>]+>", "", heading).lower()
    return re.sub(r"[^a-z0-9 -]", "", text).strip().replace(" ", "-")


def _safe_next(target: str) -> str:
    """Only a path on this server (never //host or a scheme): no open redirect."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = Query("/", max_length=2000)) -> HTMLResponse:
    return templates.TemplateResponse(request, "login.html", {"next": _safe_next(next), "error": None})


@router.post("/login", response_model=None)
def login(
    request: Request,
    token: str = Form(..., max_length=200),
    next: str = Form("/", max_length=2000),
    session: Session = Depends(get_session),
) -> HTMLResponse | RedirectResponse:
    """Check a read token once and keep it in an HttpOnly, SameSite=Strict cookie for this browser."""
    record = lookup_token(session, token.strip())
    if record is None or "read" not in granted(list(record.scopes)):
        context = {"next": _safe_next(next), "error": "unknown, revoked or scope-less token"}
        return templates.TemplateResponse(request, "login.html", context, status_code=401)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE, token.strip(), httponly=True, samesite="strict", secure=request.url.scheme == "https",
        path="/", max_age=LOGIN_SECONDS,
    )  # fmt: skip
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def install(app: FastAPI) -> None:
    """The router plus the redirect of signed-out browsers from private pages to /login."""

    async def to_login(request: Request, _error: Exception) -> RedirectResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)

    app.include_router(router)
    app.add_exception_handler(SignInRequired, to_login)
