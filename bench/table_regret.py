"""Held-out regret of the fitted table fallback versus a modal-winner baseline.

Leave-one-shape-out over every (N, K) shape: the fallback is fitted (regret-optimal
segments, CV-chosen segment counts) on all other shapes, then answers the held-out
shape's points; regret = time(answer) / time(best) - 1 from the measured times.
The baseline uses the same segments but takes each segment's most frequent winner
(what a winners-only generator does). Both answer nothing where the held-out shape's
(codebook, M, aspect class) group has no other shape; such points are counted as
uncovered and left out of the regret figures.

Data (stated in the JSON):
  host-decode: a real host-backend decode sweep (C kernels on this CPU), run here;
  synthetic-prefill: a synthetic-but-realistic Llaminar trainer CSV (tile-quantisation
    + roofline model with seeded noise, written by this script), imported through
    service.imports.llaminar_csv like a real one. It is NOT measured data.
Prints JSON; --output writes it too.
Usage: .venv/bin/python bench/table_regret.py [--output bench/results/table-regret-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from kernels.formats.registry import FORMATS
from service.db.migrate import upgrade
from service.db.models import Task
from service.db.session import session_factory
from service.imports.llaminar_csv import PREFILL_HEADER, parse_files, store_rows
from service.metrics_util import percentile  # type: ignore[import-not-found]  # replaced below
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from service.tables.collapse import collapse_aliases
from service.tables.fallback import MAX_SEGMENTS, RuleMap, aspect_class, fit_fallback, pick_rule
from service.tables.model import FallbackRule, MeasuredPoint
from service.tables.versions import alias_points, build_table
from workers.backends.registry import create_backend
from workers.execute import execute_task
