"""`POST /v1/imports/llaminar-csv`: store Llaminar trainer CSVs as imported summaries (all or nothing)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from service.api.deps import Caller, get_session, require_scope
from service.api.errors import ERROR_RESPONSES
from service.imports.llaminar_csv import (
    ARCHES,
    MAX_SAMPLES,
    CsvImportError,
    Repeats,
    display_name,
    parse_files,
    store_rows,
)
from service.statistics.summaries import LLAMINAR_TRAINER_RUNS
from service.text import NO_NUL, FileName

router = APIRouter(prefix="/v1/imports", tags=["imports"], responses={**ERROR_RESPONSES})


class CsvFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: FileName = Field(examples=["rocm_prefill_trainer.csv"])
    content: str = Field(min_length=1, max_length=64 * 1024 * 1024, pattern=NO_NUL)


class LlaminarCsvImport(BaseModel):
    """Trainer CSVs (prefill or decode schema, from the header); arch overrides the backend column."""

    model_config = ConfigDict(extra="forbid")

    arch: str | None = Field(None, examples=["gfx906"], description=f"one of {', '.join(ARCHES)}")
    files: list[CsvFile] = Field(min_length=1, max_length=64)
    samples: int = Field(
        LLAMINAR_TRAINER_RUNS,
        ge=1,
        le=MAX_SAMPLES,
        description="timed runs behind each row's min/mean/stddev when the CSV has no `samples` column "
        "(Llaminar's trainers time 20 runs after 5 warm-ups)",
    )
    repeats: Repeats = Field(
        "error",
        description="rows repeating one (arch, format, M, N, K, variant): `error` pools repeats that agree "
        "within noise and refuses those that do not (422 naming both lines); `min` keeps the lowest min_us "
        "(Llaminar's analyzer rule). Either way the response lists what was pooled or dropped.",
    )


@router.post("/llaminar-csv", status_code=201)
def import_llaminar_csv(
    request: LlaminarCsvImport,
    _caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    if request.arch is not None and request.arch not in ARCHES:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "arch"),
                    "msg": f"unknown arch; known: {', '.join(ARCHES)}",
                    "type": "value_error",
                }
            ]
        )
    try:
        parsed = parse_files(
            [(f.name, f.content) for f in request.files], request.arch, request.samples, request.repeats
        )
    except CsvImportError as error:
        index: dict[str, int] = {}
        for i, f in enumerate(request.files):
            index.setdefault(display_name(f.name), i)
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "files", index.get(problem.split(":", 1)[0], 0), "content"),
                    "msg": problem,
                    "type": "value_error",
                }
                for problem in error.problems
            ]
        ) from None
    result = store_rows(session, parsed)
    session.commit()
    return {
        "measurements": result.measurements,
        "points": result.points,
        "winners": result.winners,
        "skipped": list(parsed.skipped),
        "repeats": list(parsed.repeats),
        "rows": len(parsed.rows),
    }
