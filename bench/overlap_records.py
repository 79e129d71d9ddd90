"""How the two kernels of a [prelaunch] dispatch lay in time, from CUPTI records dumped by the cuda backend.

    TUNEBASE_CUPTI_RECORDS=/tmp/records.jsonl python bench/decode_roofline.py ...   (on the GPU)
    python bench/overlap_records.py /tmp/records.jsonl [--out summary.json]

Per variant with two kernels per dispatch (the prelaunch kernel, then the variant): the medians of the
prelaunch kernel's duration, the variant's, the gap from the prelaunch kernel's end to the variant's start
(negative: the variant started first, the programmatic dependent launch overlapped them), span and sum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

PRELAUNCH_PREFIXES = ("tb_decode_prep", "tb_prefill_prep")
SESSION_GAP_NS = 200_000_000  # records further apart than this belong to different timing sessions (points)


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Pairs (prelaunch record, the variant's next record) per timing session (one task: one point) and
    variant, in the order they were logged; keys 'session N: variant'."""
    pending: dict[str, dict[str, Any]] = {}
    pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    session, last_ns = 0, None
    for row in rows:
        if last_ns is not None and row["start_ns"] - last_ns > SESSION_GAP_NS:
            session += 1
        last_ns = row["start_ns"]
        name = f"session {session}: {row['variant']}"
        if row["kernel"].startswith(PRELAUNCH_PREFIXES):
            pending[name] = row
        elif name in pending:
            pairs.setdefault(name, []).append((pending.pop(name), row))
    out: dict[str, dict[str, float | int]] = {}
    for name, found in pairs.items():

        def median(values: list[int]) -> float:
            return round(statistics.median(values) / 1000.0, 3)

        out[name] = {
            "dispatches": len(found),
            "prelaunch_us": median([p["end_ns"] - p["start_ns"] for p, _ in found]),
            "variant_us": median([v["end_ns"] - v["start_ns"] for _, v in found]),
            "gap_us": median([v["start_ns"] - p["end_ns"] for p, v in found]),
            "span_us": median([max(p["end_ns"], v["end_ns"]) - p["start_ns"] for p, v in found]),
            "sum_us": median([p["end_ns"] - p["start_ns"] + v["end_ns"] - v["start_ns"] for p, v in found]),
            "overlapped": sum(1 for p, v in found if v["start_ns"] < p["end_ns"]),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("records", type=Path, help="the JSON lines TUNEBASE_CUPTI_RECORDS wrote")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.records.is_file():
        print(f"records: {args.records} is not a file", file=sys.stderr)
        return 2
    try:
        rows = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        print(f"records: not JSON lines ({error})", file=sys.stderr)
        return 2
    summary = summarize(rows)
    text = json.dumps({"source": str(args.records), "variants": summary}, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
