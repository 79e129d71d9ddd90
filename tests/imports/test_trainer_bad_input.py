"""Bad trainer input is refused clearly or resolved by a documented, reported rule, never silently.

Repeated rows of one variant and point (pooled within noise, refused beyond it, or kept by the
lowest min_us on request), an alias group no single variant serves, and a table for data that is
not there: each is a 422 / exit 2 (or 404 / exit 1 for a table of nothing) naming what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.imports.llaminar_csv import DECODE_HEADER, CsvImportError, parse_files
from tests.conftest import LiveServer

HEADER = ",".join(DECODE_HEADER)


def row(fmt: str, cb: int, variant: str, min_us: float, mean_us: float, std_us: float, ok: int = 1,
        n: int = 17408, k: int = 5120) -> str:  # fmt: skip
    kb, tw = variant[2:].split("/TW")
    return (
        f"rocm,decode,{fmt},{cb},S,1,{n},{k},{variant},{kb},{tw},1000,{min_us},{mean_us},{std_us},"
        f"1.0,1.0,0.0,1.0,0.0,0.9999,{ok},0"
    )


def csv_text(*rows: str) -> str:
    return "\n".join([HEADER, *rows]) + "\n"


def test_repeats_agreeing_within_noise_are_pooled_and_reported() -> None:
    a = row("Q8_0", 19, "KB1/TW4", 10.0, 10.2, 0.1)
    b = row("Q8_0", 19, "KB1/TW4", 10.05, 10.4, 0.1)
    parsed = parse_files([("one.csv", csv_text(a)), ("two.csv", csv_text(b))], "gfx906")
    (pooled,) = parsed.rows
    assert pooled.samples == 40 and pooled.min_us == 10.0 and pooled.source == "one.csv:2+two.csv:2"
    assert pooled.mean_us == pytest.approx(10.3)
    assert pooled.stddev_us == pytest.approx(0.02**0.5)  # within-run variance plus between-run spread
    (note,) = parsed.repeats
    assert "one.csv:2, two.csv:2" in note and "pooled into one summary of 40 runs" in note


def test_identical_rows_count_once() -> None:
    a = row("Q8_0", 19, "KB1/TW4", 10.0, 10.2, 0.1)
    parsed = parse_files([("x.csv", csv_text(a, a))], "gfx906")
    assert len(parsed.rows) == 1 and parsed.rows[0].samples == 20
    assert parsed.repeats == (
        "x.csv:3: identical to x.csv:2 (KB1/TW4 Q8_0 M=1 17408x5120 (gfx906 decode)); counted once",
    )


def test_contradictory_repeats_are_refused_naming_both_lines_unless_min_is_asked() -> None:
    a = row("Q8_0", 19, "KB1/TW4", 10.0, 10.2, 0.1)
    b = row("Q8_0", 19, "KB1/TW4", 11.0, 11.2, 0.1)  # 10% apart at a 1% spread: not the same run twice
    with pytest.raises(CsvImportError) as info:
        parse_files([("x.csv", csv_text(a, b))], "gfx906")
    (problem,) = info.value.problems
    assert problem.startswith("x.csv:2: KB1/TW4 Q8_0 M=1 17408x5120") and "x.csv:3" in problem
    assert "repeats=min" in problem
    kept = parse_files([("x.csv", csv_text(a, b))], "gfx906", repeats="min")
    assert [r.min_us for r in kept.rows] == [
        10.0
    ] and "kept the lowest min_us 10 from x.csv:2" in kept.repeats[0]


def test_impossible_rows_and_bad_options_are_refused() -> None:
    with pytest.raises(CsvImportError, match=r"x.csv:2: min_us=12.0 is above mean_us=11.0"):
        parse_files([("x.csv", csv_text(row("Q8_0", 19, "KB1/TW4", 12.0, 11.0, 0.1)))], "gfx906")
    with pytest.raises(ValueError, match="samples"):
        parse_files([("x.csv", csv_text(row("Q8_0", 19, "KB1/TW4", 1.0, 1.1, 0.1)))], "gfx906", samples=0)
    with_samples = csv_text(row("Q8_0", 19, "KB1/TW4", 1.0, 1.1, 0.1)).replace(
        "is_best\n", "is_best,samples\n"
    )
    with_samples = with_samples.replace(",1,0\n", ",1,0,200\n")
    assert parse_files([("x.csv", with_samples)], "gfx906").rows[0].samples == 200


def _token(server: LiveServer) -> None:
    made = server.cli("token", "create", "--name", "ci", "--scopes", "read,submit")
    assert made.returncode == 0, made.stderr
    server.env["TUNEBASE_TOKEN"] = made.stdout.strip()


def test_cli_and_api_refuse_clearly(live_server: LiveServer, tmp_path: Path) -> None:
    _token(live_server)
    contradictory = tmp_path / "contradictory.csv"
    contradictory.write_text(
        csv_text(row("Q8_0", 19, "KB1/TW4", 10.0, 10.2, 0.1), row("Q8_0", 19, "KB1/TW4", 11.0, 11.2, 0.1))
    )
    run = live_server.cli("import", "llaminar-csv", str(contradictory), "--arch", "gfx906")
    assert run.returncode == 2 and "contradictory.csv:2" in run.stderr and "contradictory.csv:3" in run.stderr
    run = live_server.cli(
        "import", "llaminar-csv", str(contradictory), "--arch", "gfx906", "--repeats", "min"
    )
    assert run.returncode == 0 and "repeat: contradictory.csv:2, contradictory.csv:3" in run.stdout
    bad_option = live_server.cli(
        "import", "llaminar-csv", str(contradictory), "--arch", "gfx906", "--repeats", "x"
    )
    assert (
        bad_option.returncode == 2
        and "--repeats must be error or min" in bad_option.stdout + bad_option.stderr
    )

    # Q4_1 passes only KB1/TW4 and KB2/TW8 where Q4_K passes only KB8/TW8: no one choice serves both.
    aliases = tmp_path / "aliases.csv"
    aliases.write_text(csv_text(
        row("Q4_1", 5, "KB1/TW4", 10.0, 10.1, 0.05), row("Q4_1", 5, "KB2/TW8", 11.0, 11.1, 0.05),
        row("Q4_1", 5, "KB8/TW8", 9.0, 9.1, 0.05, ok=0),
        row("Q4_K", 5, "KB1/TW4", 12.0, 12.1, 0.05, ok=0), row("Q4_K", 5, "KB2/TW8", 12.5, 12.6, 0.05, ok=0),
        row("Q4_K", 5, "KB8/TW8", 13.0, 13.1, 0.05),
    ))  # fmt: skip
    run = live_server.cli("import", "llaminar-csv", str(aliases), "--arch", "gfx90a", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["winners"] == 2
    table = live_server.cli("table", "generate", "--arch", "gfx90a")
    assert table.returncode == 2, table.stdout + table.stderr
    message = " ".join((table.stdout + table.stderr).split())
    assert "HTTP 422" in message and "no variant passed parity for every alias" in message
    assert "Q4_1: KB1/TW4, KB2/TW8; Q4_K: KB8/TW8" in message

    # A table of an arch nothing was measured on: a 404 naming what is missing (exit 1, documented).
    nothing = live_server.cli("table", "generate", "--arch", "sm_90")
    assert nothing.returncode == 1 and "no winners for arch=sm_90 phase=decode" in nothing.stderr
