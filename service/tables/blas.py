"""One BLAS thread for the table models' small solves.

The surrogate's local fits and the neighbours' estimators solve systems of ~100 unknowns thousands of times;
OpenBLAS's threads only contend on them, and on a loaded host they spin: a trainer CSV's table took 116 s
with the default threads and 11 s with one on the 2-core CI machine (tests/imports/test_trainer_judging.py).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache
from typing import Any

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # inspects the loaded libraries once, not per fit


def single_blas_thread() -> AbstractContextManager[Any]:
    """Limit BLAS to one thread within the block (restored after)."""
    return _controller().limit(limits=1, user_api="blas")
