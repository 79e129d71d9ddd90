"""Which compile jobs a sweep sends, and how `tunebase worker --compile` is started (no broker needed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from workers.celery_app import COMPILE_QUEUES, COMPILE_UNIT, compile_queue, make_celery
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


def test_each_backend_has_its_own_compile_queue() -> None:
    from service.config import Settings

    app = make_celery(Settings(broker_url="memory://"))
    assert COMPILE_UNIT not in app.conf.task_routes  # the sender names the queue: the task's backend's
    assert sorted(COMPILE_QUEUES) == ["compile.cuda", "compile.host", "compile.rocm"]
    assert set(COMPILE_QUEUES) <= {q.name for q in app.conf.task_queues}
    assert compile_queue("rocm") == "compile.rocm"
    with pytest.raises(KeyError, match="unknown backend 'metal'"):
        compile_queue("metal")


def test_the_compile_worker_has_no_gpu_and_a_process_per_core() -> None:
    plan = plan_compile_worker([])
    assert plan.queues == list(COMPILE_QUEUES) and plan.gpu is None and plan.arch is None
    assert plan.concurrency == (os.cpu_count() or 1)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "" and plan.env["ROCR_VISIBLE_DEVICES"] == ""
    cuda_only = plan_compile_worker(["maintenance", "compile.cuda"], 3, ["cuda"])
    assert cuda_only.queues == ["compile.cuda", "maintenance"]
    assert plan_compile_worker([], None, ["rocm", "cuda", "rocm"]).queues == ["compile.rocm", "compile.cuda"]
    with pytest.raises(LaunchError, match="unknown backend 'metal'"):
        plan_compile_worker([], None, ["metal"])
    assert plan_compile_worker([], 3).concurrency == 3
    for bad in (0, -2):  # never read as "one per core"
        with pytest.raises(LaunchError, match=f"at least 1, not {bad}"):
            plan_compile_worker([], bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compile", "--gpu", "0"], "--compile runs no GPU work"),
        (["--backend", "cuda"], "--backend is for --compile workers"),
        (["--compile", "--backend", "cuda,metal"], "unknown backend 'metal'"),
    ],
)
def test_bad_compile_worker_arguments_are_usage_errors(args: list[str], message: str) -> None:
    env = {**os.environ, "TUNEBASE_BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "service.cli", "worker", *args]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and message in proc.stdout + proc.stderr


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
