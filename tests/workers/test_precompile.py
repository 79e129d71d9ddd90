"""Which compile jobs a sweep sends, and how `tunebase worker --compile` is started (no broker needed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from workers.celery_app import COMPILE_QUEUE, COMPILE_UNIT, make_celery
from workers.launch import LaunchError, plan_compile_worker
from workers.precompile import compile_jobs, precompiled_arch

A, B = ("KB1", "KB2"), ("KB1",)


def test_one_job_per_package_format_arch_and_variant_list() -> None:
    rows = [
        (1, "sm_90", "Q8_0", "tb-decode", "v1", A),
        (2, "sm_90", "Q8_0", "tb-decode", "v1", A),  # same unit as task 1
        (3, "sm_90", "Q4_0", "tb-decode", "v1", A),
        (4, "sm_90", "Q8_0", "tb-decode", "v1", B),  # another variant list: another unit
        (5, "sm_90", "Q8_0", "my-gemv", "v9", A),  # another package
        (6, "gfx906", "Q8_0", "tb-decode", "v1", A),  # another arch
        (7, "host", "Q8_0", "tb-decode", "v1", A),  # host: not precompiled by default
        (8, "sm_90", "Q4_0", "tb-decode", "v1", list(A)),  # JSON gives lists: same unit as task 3
    ]
    assert compile_jobs(rows) == [1, 3, 4, 5, 6]
    assert compile_jobs(rows, "all") == [1, 3, 4, 5, 6, 7]
    assert compile_jobs(rows, "off") == []
    assert not precompiled_arch("no-such-arch", "all")


def test_the_compile_task_routes_to_the_compile_queue() -> None:
    from service.config import Settings

    app = make_celery(Settings(broker_url="memory://"))
    assert app.conf.task_routes[COMPILE_UNIT] == {"queue": COMPILE_QUEUE}
    assert COMPILE_QUEUE in {q.name for q in app.conf.task_queues}


def test_the_compile_worker_has_no_gpu_and_a_process_per_core() -> None:
    plan = plan_compile_worker([])
    assert plan.queues == [COMPILE_QUEUE] and plan.gpu is None and plan.arch is None
    assert plan.concurrency == (os.cpu_count() or 1)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "" and plan.env["ROCR_VISIBLE_DEVICES"] == ""
    assert plan_compile_worker(["maintenance", "compile"], 3).queues == [COMPILE_QUEUE, "maintenance"]
    assert plan_compile_worker([], 3).concurrency == 3
    for bad in (0, -2):  # never read as "one per core"
        with pytest.raises(LaunchError, match=f"at least 1, not {bad}"):
            plan_compile_worker([], bad)


def test_compile_with_gpu_is_a_usage_error() -> None:
    env = {**os.environ, "TUNEBASE_BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "service.cli", "worker", "--compile", "--gpu", "0"]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "--compile runs no GPU work" in proc.stdout + proc.stderr


def test_a_bad_precompile_setting_is_a_usage_error_naming_it() -> None:
    """A typo in TUNEBASE_PRECOMPILE (read when the worker's imports build the Celery app) exits 2 with the
    variable and its choices, not a pydantic traceback with exit 1."""
    env = {**os.environ, "TUNEBASE_BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(REPO)}
    env["TUNEBASE_PRECOMPILE"] = "yes"
    argv = [sys.executable, "-m", "service.cli", "worker", "--compile"]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    output = " ".join((proc.stdout + proc.stderr).split())  # rich wraps at 80 columns
    assert proc.returncode == 2, output
    assert "TUNEBASE_PRECOMPILE='yes'" in output and "'gpu', 'all' or 'off'" in output, output
    assert "Traceback" not in output, output


def test_tunebase_workers_runs_a_compile_worker_unless_precompile_is_off() -> None:
    from workers.supervisor import host_children

    names = [c.name for c in host_children([(0, "sm_90"), (1, "sm_90")], False, True)]
    assert names == ["gpu0:sm_90", "gpu1:sm_90", "maintenance", "compile"]
    compile_child = host_children([(0, "sm_90")], False, True)[-1]
    assert compile_child.argv[-2:] == ["worker", "--compile"]
    # off: no compile message is ever sent, so no core-wide pool of idle processes either
    off = host_children([(0, "sm_90")], False, True, "off")
    assert [c.name for c in off] == ["gpu0:sm_90", "maintenance"]
    assert [c.name for c in host_children([], False, False)] == ["host"]  # no GPU: the host arch
