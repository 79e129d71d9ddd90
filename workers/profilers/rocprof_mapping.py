"""Map profiler dispatch rows back to the variants a harness launched, by kernel symbol and order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from workers.profilers.rocprof_common import DispatchRow


def _matches(row_kernel: str, symbol: str) -> bool:
    """rocprof prints demangled names with a signature (``tb_x(int*)``); extern "C" ones print bare."""
    return row_kernel == symbol or row_kernel.startswith(symbol + "(")


def map_dispatches(
    rows: Sequence[DispatchRow], launches: Sequence[tuple[str, str]]
) -> dict[str, list[DispatchRow]]:
    """``launches`` is the harness's launch log in order: (variant, kernel symbol), warm-up included.

    The n-th profiler row of a symbol (in start-time order) belongs to the n-th launch of that symbol,
    so two variants sharing one symbol (same code, different launch geometry) stay apart.
    Raises ValueError when the counts disagree: a dropped or foreign dispatch must not shift times.
    """
    ordered = sorted(rows, key=lambda r: (r.start_ns, r.index))
    by_symbol: dict[str, list[DispatchRow]] = defaultdict(list)
    symbols = {symbol for _, symbol in launches}
    for row in ordered:
        owner = next((s for s in symbols if _matches(row.kernel, s)), None)
        if owner is not None:
            by_symbol[owner].append(row)
    expected: dict[str, int] = defaultdict(int)
    for _, symbol in launches:
        expected[symbol] += 1
    for symbol, count in expected.items():
        if len(by_symbol[symbol]) != count:
            raise ValueError(
                f"profiler saw {len(by_symbol[symbol])} dispatches of {symbol}, harness launched {count}"
            )
    cursor: dict[str, int] = defaultdict(int)
    result: dict[str, list[DispatchRow]] = defaultdict(list)
    for variant, symbol in launches:
        result[variant].append(by_symbol[symbol][cursor[symbol]])
        cursor[symbol] += 1
    return dict(result)
