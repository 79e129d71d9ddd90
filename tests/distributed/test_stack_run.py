"""bench/stack_run.py end to end on the host backend: the same driver the two-GPU machine runs.

API, beat, a maintenance worker, a compile worker and two `tunebase worker --gpu N --arch host` Celery
workers against the shared Postgres and a private Redis; one worker is SIGKILLed mid-task; the sweep must
finish with no duplicate measurements and the nightly task must store tables. Slow (40 s to two minutes on
two cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_ADMIN_URL, REPO
from tests.distributed.conftest import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_stack_run_on_host_survives_a_killed_worker(private_redis: RedisServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [
        sys.executable, str(REPO / "bench/stack_run.py"), "--arch", "host", "--profile", "smoke",
        "--formats", "Q8_0,Q4_K", "--m", "1,2,3,4", "--kill-after", "2", "--timeout", "400",
        "--database-url", POSTGRES_ADMIN_URL, "--broker-url", f"redis://127.0.0.1:{private_redis.port}/61",
        "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    summary = json.loads((out / "stack-summary.json").read_text())
    assert proc.returncode == 0, (summary["failures"], proc.stderr[-3000:])
    assert summary["mode"] == "celery" and summary["ok"]
    assert summary["sweep"]["tasks_final"]["done"] == summary["sweep"]["tasks"] == 24
    killed = summary["killed_worker"]
    assert killed["signal"] == "SIGKILL" and killed["tasks_in_flight"]
    reclaimed = {row["id"] for row in summary["reclaimed_tasks"] if row["state"] == "done"}
    assert set(killed["tasks_in_flight"]) <= reclaimed
    assert not any(v for k, v in summary["duplicates"].items() if k != "sql")
    assert summary["nightly"]["new_tables"]
    assert summary["racing"]["dispatches_stored"] < summary["racing"]["exhaustive_budget"]
    assert (out / "stack-logs" / "worker-gpu1.log").read_text().count("succeeded") >= 2
    compiled = summary["compile"]  # --arch host precompiles too (TUNEBASE_PRECOMPILE=all): one job per format
    assert compiled["jobs_expected"] == compiled["jobs_logged"] == 2 and not compiled["failed_jobs"]
    assert set(compiled["seconds_per_format"]) == {"Q8_0@host", "Q4_K@host"}
    assert set(summary["measure"]["task_seconds_total_per_worker"]) == {"worker-gpu0", "worker-gpu1"}


def test_stack_run_with_one_gpu_finishes_through_the_restarted_worker(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """One GPU, its only worker SIGKILLed: only the restarted worker can take the lost task."""
    out = tmp_path / "out"
    argv = [
        sys.executable, str(REPO / "bench/stack_run.py"), "--arch", "host", "--profile", "smoke",
        "--gpus", "0", "--kill-gpu", "0", "--restart-killed", "2", "--formats", "Q8_0", "--m", "1,2,3,4",
        "--kill-after", "2", "--timeout", "300", "--database-url", POSTGRES_ADMIN_URL,
        "--broker-url", f"redis://127.0.0.1:{private_redis.port}/62", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=480, check=False)
    summary = json.loads((out / "stack-summary.json").read_text())
    assert proc.returncode == 0, (summary["failures"], proc.stderr[-3000:])
    assert summary["ok"] and summary["sweep"]["tasks_final"]["done"] == summary["sweep"]["tasks"] == 12
    killed = summary["killed_worker"]
    assert killed["worker"] == "worker-gpu0" and killed["restarted"]["worker"] == "worker-gpu0-restarted"
    assert killed["restarted"]["seconds_after_submit"] >= killed["seconds_after_submit"] + 2
    reclaimed = {row["id"] for row in summary["reclaimed_tasks"] if row["state"] == "done"}
    assert set(killed["tasks_in_flight"]) <= reclaimed
    assert not any(v for k, v in summary["duplicates"].items() if k != "sql")
    done = summary["tasks_done_per_worker_log"]
    assert done["worker-gpu0"] == killed["tasks_done_before_kill"]
    assert done["worker-gpu0"] + done["worker-gpu0-restarted"] == 12
