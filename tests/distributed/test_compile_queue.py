"""The compile queue with real processes: Redis, Postgres, `tunebase worker --compile`, NVRTC.

A GPU sweep sends one compile message per (package, format, arch) next to its task messages; the
compile worker builds the sm_90 cubins without a GPU into the shared artifact directory; a compile
job that fails is logged as an error with the reason while the sweep's tasks run to the end.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import REPO
from tests.distributed.conftest import Cluster, smoke_spec
from workers.harness import cuda_driver as cd

pytestmark = pytest.mark.postgres

CUDA_VARIANTS = ["MX1/KB1/RW1/U2/RG1/PG2/PP1", "MX2/KB1/RW1/U2/RG1/PG2/PP1"]  # M = 1 both, M = 2 the MX2


def start_compile_worker(
    cluster: Cluster, name: str, env: dict[str, str] | None = None, backend: str | None = None
) -> None:
    argv = [
        sys.executable,
        "-m",
        "service.cli",
        "worker",
        "--compile",
        "--concurrency",
        "2",
        "--loglevel",
        "INFO",
        *(["--backend", backend] if backend else []),
    ]
    log = (cluster.home / f"{name}.log").open("ab")
    process = subprocess.Popen(argv, env=env or cluster.env(), cwd=REPO, stdout=log, stderr=log)
    cluster.workers.append(process)


def wait_for_lines(cluster: Cluster, name: str, needle: str, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in cluster.log(name).splitlines() if needle in line]
        if len(lines) >= count:
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(lines)} of {count} {needle!r} lines:\n{cluster.log(name)[-4000:]}")
        time.sleep(0.3)


def queue_bodies(cluster: Cluster, queue: str) -> list[list[int]]:
    """The args of every message waiting in a Redis queue (kombu keeps a queue as a list)."""
    client = redis.Redis.from_url(cluster.broker_url)
    out = []
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        out.append(list(body[0]))
    return out


@pytest.mark.skipif(cd.nvrtc is None, reason=f"NVRTC is not installed: {cd.IMPORT_ERROR}")
def test_a_gpu_sweep_sends_one_compile_job_per_format_and_the_compile_worker_builds_the_cubins(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.artifact_dir = tmp_path / "artifacts"  # a cache of its own: every unit is compiled here
    shapes = [{"name": f"Cq_{i}", "n": 256, "k": 256 * (i + 1)} for i in range(3)]
    spec = smoke_spec(arch="sm_90", formats=["Q8_0", "Q4_0"], shapes=shapes, m=[1, 2], variants=CUDA_VARIANTS)
    sweep_id = cluster.submit(spec)
    assert cluster.counts(sweep_id)["total"] == 12
    jobs = queue_bodies(cluster, "compile.cuda")
    assert queue_bodies(cluster, "compile.rocm") == queue_bodies(cluster, "compile.host") == []
    assert len(queue_bodies(cluster, "arch.sm_90")) == 12
    assert len(jobs) == 2  # (tb-decode, Q8_0, sm_90) and (tb-decode, Q4_0, sm_90), once each
    with cluster.factory() as session:
        from service.db.models import Task

        formats = sorted(session.get(Task, ids[0]).format for ids in jobs)  # type: ignore[union-attr]
    assert formats == ["Q4_0", "Q8_0"]

    start_compile_worker(cluster, "compile", backend="cuda")  # no GPU here: CUDA_VISIBLE_DEVICES is emptied
    lines = wait_for_lines(cluster, "compile", "compile-job", 2, timeout=120)
    assert all("ok=True" in line and "compiled=1" in line and "arch=sm_90" in line for line in lines), lines
    cubins = sorted(p.name for p in cluster.artifact_dir.rglob("*.cubin"))
    assert (
        len(cubins) == 2
        and cubins[0].startswith("tb-decode_q4_0_")
        and cubins[1].startswith("tb-decode_q8_0")
    )
    assert redis.Redis.from_url(cluster.broker_url).llen("compile.cuda") == 0

    # the same sweep again: the jobs are sent again, find the cubins and compile nothing
    again = cluster.submit({**spec, "labels": {"run": "2"}})
    assert again != sweep_id
    lines = wait_for_lines(cluster, "compile", "compile-job", 4, timeout=60)
    assert all("compiled=0" in line and "ok=True" in line for line in lines[2:]), lines


def test_a_failed_compile_job_is_logged_and_the_tasks_still_finish(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile worker without a C compiler (as a compile image without the toolchain would be): its
    job fails with the reason, the host worker compiles on its own and every task is done."""
    cluster.artifact_dir = tmp_path / "artifacts"
    monkeypatch.setenv("TUNEBASE_PRECOMPILE", "all")  # host units too, so this runs on any machine
    bare = tmp_path / "bin-without-cc"
    bare.mkdir()
    start_compile_worker(cluster, "compile", {**cluster.env(), "PATH": str(bare)})
    wait_for_lines(cluster, "compile", " ready.", 1, timeout=60)
    sweep_id = cluster.submit(smoke_spec(formats=["Q8_0", "Q4_0"]))
    line = wait_for_lines(cluster, "compile", "compile-job", 2, timeout=60)
    assert all("ok=False" in x and "arch=host" in x for x in line), line
    assert "C compiler 'cc' not found" in cluster.log("compile")
    assert "ERROR" in cluster.log("compile")
    cluster.start_worker("host-worker")
    counts = cluster.wait(sweep_id, timeout=120)
    assert counts["done"] == counts["total"] == 8 and counts["failed"] == 0
    cluster.assert_no_duplicates(sweep_id)
