"""The production stack end to end: Postgres, Redis, the API, Celery beat, a maintenance worker, a
`tunebase worker --compile` (NVRTC/cc on every core, no GPU) and two pinned `tunebase worker --gpu N`
Celery workers; a sweep submitted over HTTP; one GPU worker SIGKILLed mid-sweep; the sweep must still
finish (the reconciler re-queues what the dead worker held) with no duplicate measurements (checked in
SQL); then the nightly task must regenerate tables. The summary splits compile time (the compile worker's
jobs, per format) from measure time (the GPU workers' tasks).

``--gpus 0 --kill-gpu 0 --restart-killed 5``: one GPU, its only worker SIGKILLed mid-task and a new one
started 5 s later (what a supervisor's restart policy does); the sweep can finish only through the
reconciler's re-queue and the new worker.

``--compile-only`` starts no GPU worker: it submits the sweep and waits for the compile worker to build
every unit (e.g. the sm_90 cubins on a machine without a GPU, to carry them as a warm cache).

Servers: ``--servers .srv`` starts Postgres 16 and Redis 7 from carried files (bench/stack_servers.py; the
device machine has no network), or ``--database-url``/``--broker-url`` use running ones (a fresh database
is created; the Redis DB must be empty). ``--arch host`` runs the same thing on a machine without a GPU
(two host-backend workers, still started with ``--gpu 0`` and ``--gpu 1``).

    python3 bench/stack_run.py --servers .srv --arch sm_90 --profile qwen36-moe --out $OUT   # 2x H200
    .venv/bin/python bench/stack_run.py --servers .srv --arch host --profile smoke --out var/stack
    .venv/bin/python bench/stack_run.py --servers .srv --arch sm_90 --compile-only --out var/stack  # no GPU
Writes ``stack-summary.json`` (``"mode": "celery"``) and every process's log under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import stack_servers  # noqa: E402

SUCCEEDED = re.compile(r"Task tunebase\.run_task\[[0-9a-f-]+\] succeeded in [0-9.]+s: '(\w+)'")
COMPILE_JOB = re.compile(r"compile-job (.*)$")
STOP_TIMEOUT_S = 30.0


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def start(self, base_env: dict[str, str], pid_file: Path) -> None:
        handle = self.log.open("ab")
        self.process = subprocess.Popen(  # long-lived; stopped in stop()
            self.argv, env={**base_env, **self.env}, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        with pid_file.open("a") as pids:  # for a wrapper to end them by id if this process is killed
            pids.write(f"{self.process.pid}\n")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def tree(self) -> list[int]:
        return [self.pid, *descendants(self.pid)] if self.process is not None else []

    def done_tasks(self) -> int:
        """Tasks this worker finished as 'done', from Celery's own 'succeeded' log lines."""
        try:
            return sum(1 for m in SUCCEEDED.finditer(self.log.read_text(errors="replace")) if m[1] == "done")
        except OSError:
            return 0

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_tree(self.tree())
                self.process.wait(timeout=STOP_TIMEOUT_S)
        return self.process.returncode


def task_seconds(log: Path) -> dict[str, float] | None:
    """min / median / max of Celery's 'succeeded in Xs' for run_task in one worker's log."""
    found = re.findall(r"run_task\[[0-9a-f-]+\] succeeded in ([0-9.]+)s", log.read_text(errors="replace"))
    times = sorted(float(x) for x in found)
    if not times:
        return None
    return {"tasks": len(times), "min": round(times[0], 2), "median": round(times[len(times) // 2], 2),
            "max": round(times[-1], 2)}  # fmt: skip


def compile_jobs_logged(log: Path) -> list[dict[str, Any]]:
    """The compile worker's ``compile-job key=value ...`` lines (workers/precompile.py), parsed."""
    try:
        text_ = log.read_text(errors="replace")
    except OSError:
        return []
    jobs = []
    for line in text_.splitlines():
        found = COMPILE_JOB.search(line)
        if found is None:
            continue
        head, _, error = found[1].partition(" error=")
        job: dict[str, Any] = dict(re.findall(r"(\w+)=(\S+)", head))
        for key in ("seconds", "waited"):
            if key in job:
                job[key] = float(job[key])
        for key in ("task", "units", "compiled"):
            if key in job:
                job[key] = int(job[key])
        job["ok"] = job.get("ok") == "True"
        if error:
            job["error"] = error
        jobs.append(job)
    return jobs


def task_seconds_all(log: Path) -> list[float]:
    found = re.findall(r"run_task\[[0-9a-f-]+\] succeeded in ([0-9.]+)s", log.read_text(errors="replace"))
    return [float(x) for x in found]


def descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc), parents before children."""
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pids: list[int]) -> list[int]:
    killed = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def run_cli(argv: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", *argv], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"tunebase {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def fresh_database(admin_url: str, name: str) -> str:
    url = make_url(admin_url)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def wait_http(client: httpx.Client, path: str, timeout: float, procs: list[Proc]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.process is not None and proc.process.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.process.returncode} (see {proc.log})")
        with contextlib.suppress(httpx.HTTPError):
            if client.get(path, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{path} did not answer within {timeout:g} s")


def wait_ready(workers: list[Proc], timeout: float) -> None:
    """Celery prints 'ready.' once a worker consumes its queues."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in workers:
            if proc.process is not None and proc.process.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.process.returncode} (see {proc.log})")
        if all(" ready." in p.log.read_text(errors="replace") for p in workers if p.log.exists()):
            return
        time.sleep(0.3)
    raise RuntimeError(f"workers not ready within {timeout:g} s")


def sql_rows(engine: Engine, query: str, **params: object) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        return [dict(r._mapping) for r in connection.execute(text(query), params)]


def running_owned_by(engine: Engine, sweep_id: int, pids: list[int]) -> list[int]:
    owners = [f"{socket.gethostname()}:{pid}" for pid in pids]
    rows = sql_rows(
        engine, "SELECT id, lease_owner FROM tasks WHERE sweep_id = :s AND state = 'running'", s=sweep_id
    )
    return [int(r["id"]) for r in rows if r["lease_owner"] in owners]


def checks(engine: Engine, sweep_id: int) -> dict[str, Any]:
    """Duplicates, reclaimed tasks and who ran what, straight from SQL."""
    dup_task = sql_rows(engine, """
        SELECT task_id, variant_id, count(*) AS n FROM measurements WHERE sweep_id = :s
        GROUP BY task_id, variant_id HAVING count(*) > 1""", s=sweep_id)  # fmt: skip
    dup_point = sql_rows(engine, """
        SELECT arch, phase, format, m, n, k, kernel, variant_id, count(*) AS n FROM measurements
        WHERE sweep_id = :s GROUP BY arch, phase, format, m, n, k, kernel, variant_id
        HAVING count(*) > 1""", s=sweep_id)  # fmt: skip
    dup_seq = sql_rows(engine, """
        SELECT d.measurement_id, d.seq, count(*) AS n FROM dispatches d
        JOIN measurements ms ON ms.id = d.measurement_id WHERE ms.sweep_id = :s
        GROUP BY d.measurement_id, d.seq HAVING count(*) > 1""", s=sweep_id)  # fmt: skip
    per_device = sql_rows(engine, """
        SELECT dv.uuid AS uuid, dv.name AS name, count(*) AS tasks FROM tasks t
        JOIN devices dv ON dv.id = t.device_id WHERE t.sweep_id = :s AND t.state = 'done'
        GROUP BY dv.uuid, dv.name ORDER BY dv.uuid""", s=sweep_id)  # fmt: skip
    reclaimed = sql_rows(engine, """
        SELECT t.id, t.shape, t.format, t.m, t.state, t.attempts, dv.uuid AS device_uuid FROM tasks t
        LEFT JOIN devices dv ON dv.id = t.device_id WHERE t.sweep_id = :s AND t.attempts > 1
        ORDER BY t.id""", s=sweep_id)  # fmt: skip
    stored = sql_rows(engine, """
        SELECT count(DISTINCT ms.id) AS measurements, count(d.measurement_id) AS dispatches,
               count(DISTINCT ms.task_id) AS tasks FROM measurements ms
        LEFT JOIN dispatches d ON d.measurement_id = ms.id
        WHERE ms.sweep_id = :s""", s=sweep_id)[0]  # fmt: skip
    states = sql_rows(engine, "SELECT state, count(*) AS n FROM tasks WHERE sweep_id = :s GROUP BY state",
                      s=sweep_id)  # fmt: skip
    return {
        "task_states": {r["state"]: int(r["n"]) for r in states},
        "duplicates": {
            "measurements_same_task_and_variant": len(dup_task),
            "measurements_same_point_and_variant": len(dup_point),
            "dispatch_rows_same_measurement_and_seq": len(dup_seq),
            "sql": "GROUP BY (task_id, variant_id), (arch, phase, format, m, n, k, kernel, variant_id) and "
            "(measurement_id, seq) within the sweep, HAVING count(*) > 1",
        },
        "tasks_per_device_uuid": {r["uuid"]: int(r["tasks"]) for r in per_device},
        "device_names": {r["uuid"]: r["name"] for r in per_device},
        "reclaimed_tasks": reclaimed,
        "stored": {k: int(v) for k, v in stored.items()},
    }


def gpu_inventory() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    out = subprocess.run([smi, "--query-gpu=index,name,uuid,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def versions(servers: stack_servers.Servers | None) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("celery", "kombu", "redis", "psycopg", "sqlalchemy", "fastapi", "uvicorn"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    if servers is not None:
        found.update({f"{k}-server": v for k, v in servers.versions.items()})
    return found


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="sm_90", help="sm_90 on the H200 pair; host anywhere")
    p.add_argument("--gpus", default="0,1", help="device indices; one worker each")
    p.add_argument("--servers", type=Path, default=None, help="start Postgres/Redis from this folder (.srv)")
    p.add_argument("--database-url", default="", help="a running Postgres (admin URL; a fresh DB is made)")
    p.add_argument("--broker-url", default="", help="a running Redis DB (must be empty)")
    p.add_argument("--profile", default="qwen36-moe")
    p.add_argument("--formats", default="Q8_0,Q4_0,Q4_K,IQ4_XS")
    p.add_argument("--m", default="1,2,3,4")
    p.add_argument("--strategy", default="race", choices=["race", "exhaustive"])
    p.add_argument("--min-dispatches", type=int, default=20)
    p.add_argument("--max-dispatches", type=int, default=200)
    p.add_argument("--kill-gpu", type=int, default=1, help="worker (device index) to SIGKILL; -1: none")
    p.add_argument("--kill-after", type=int, default=3, help="kill once it finished this many tasks")
    p.add_argument("--restart-killed", type=float, default=-1.0,
                   help="start a new worker for the killed one's GPU this many seconds after the kill, as a "
                   "supervisor's restart policy does (compose: restart: unless-stopped); < 0: never. With "
                   "one GPU this is how the sweep can finish after the kill")  # fmt: skip
    p.add_argument("--lease-seconds", type=float, default=15)
    p.add_argument("--reconcile-seconds", type=float, default=5)
    p.add_argument("--timeout", type=float, default=600, help="seconds for the sweep, kill included")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    p.add_argument("--out", type=Path, required=True, help="stack-summary.json and logs go here")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder and the database")
    p.add_argument("--precompile", choices=["gpu", "all", "off"], default=None,
                   help="TUNEBASE_PRECOMPILE for the stack (default: all on --arch host, else gpu); "
                   "off starts no compile worker")  # fmt: skip
    p.add_argument("--compile-concurrency", type=int, default=os.cpu_count() or 1,
                   help="processes of the compile worker (default: every core)")  # fmt: skip
    p.add_argument("--compile-only", action="store_true",
                   help="no GPU workers: submit, wait for the compile worker's units, stop")  # fmt: skip
    args = p.parse_args()
    if args.precompile is None:
        args.precompile = "all" if args.arch == "host" else "gpu"
    if args.compile_only and args.precompile == "off":
        p.error("--compile-only needs a compile worker: leave out --precompile off")
    if args.servers is None and not (args.database_url and args.broker_url):
        p.error("give --servers DIR, or both --database-url and --broker-url")
    return args


class StackRun:
    """One run: each step adds to ``summary`` and, when something is wrong, to ``failures``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.phases: dict[str, float] = {}
        self.work = args.work or Path(tempfile.mkdtemp(prefix="tb-stack-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.logs = args.out / "stack-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        for stale in [*self.logs.glob("*.log"), args.out / "stack-pids"]:  # an earlier run's, same --out:
            stale.unlink(missing_ok=True)  # its lines would be counted as this run's, its pids ended
        self.failures: list[str] = []
        self.summary: dict[str, Any] = {
            "bench": "stack_run",
            "mode": "celery",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python", "bench/stack_run.py", *sys.argv[1:]]),
            "machine": {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "gpus": gpu_inventory()},
            "arch": args.arch,
            "precompile": args.precompile,
            "compile_only": args.compile_only,
        }
        self.servers: stack_servers.Servers | None = None
        self.procs: list[Proc] = []
        self.workers: list[Proc] = []
        self.compiler: Proc | None = None
        self.compile_jobs_expected = 0
        self.engine: Engine | None = None
        self.gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
        self.admin_url = ""
        self.database_name = f"tb_stack_{os.getpid()}"
        self.stack_env: dict[str, str] = {}

    def phase(self, name: str, since: float) -> None:
        self.phases[name] = time.monotonic() - since

    def start_servers(self) -> tuple[str, str]:
        """(database URL of a fresh database, broker URL)."""
        t = time.monotonic()
        if self.args.servers is not None:
            self.servers = stack_servers.start_carried(self.args.servers.resolve(), self.work / "servers")
            with (self.args.out / "stack-pids").open("a") as pids:
                pids.writelines(f"{process.pid}\n" for _, process in self.servers.processes)
            admin_url, broker_url = self.servers.postgres_url, f"{self.servers.redis_url}/0"
        else:
            import redis

            admin_url, broker_url = self.args.database_url, self.args.broker_url
            if redis.Redis.from_url(broker_url).dbsize():
                raise RuntimeError(f"{broker_url} is not empty; give an unused Redis DB number")
        self.admin_url = admin_url
        database_url = fresh_database(admin_url, self.database_name)
        self.engine = create_engine(database_url, pool_pre_ping=True)
        self.summary["servers"] = (
            "carried (.srv: pgserver wheel, Debian redis .debs)" if self.servers else "given URLs"
        )
        self.summary["versions"] = versions(self.servers)
        self.phase("servers_s", t)
        return database_url, broker_url

    def start_stack(self, database_url: str, broker_url: str) -> httpx.Client:
        """Migrations, a token, then the API, beat, the maintenance worker and one worker per GPU."""
        args = self.args
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "TUNEBASE_DATABASE_URL": database_url,
            "TUNEBASE_BROKER_URL": broker_url,
            "TUNEBASE_HOME": str(self.work / "home"),
            "TUNEBASE_LEASE_SECONDS": str(args.lease_seconds),
            "TUNEBASE_HEARTBEAT_SECONDS": str(max(1.0, args.lease_seconds / 4)),
            "TUNEBASE_RECONCILE_SECONDS": str(args.reconcile_seconds),
            "TUNEBASE_REQUEUE_LOST_AFTER_SECONDS": str(max(10.0, 2 * args.lease_seconds)),
            "TUNEBASE_PRECOMPILE": args.precompile,
        }
        self.stack_env = env
        t = time.monotonic()
        run_cli(["db", "upgrade"], env, 180)
        scopes = ["--scopes", "read,submit,admin"]
        token = run_cli(["token", "create", "--name", "stack-bench", *scopes], env, 120).split()[-1]
        self.phase("migrate_s", t)

        port = stack_servers.free_port()
        py, cli, logs = sys.executable, ["-m", "service.cli"], self.logs
        beat = [py, "-m", "celery", "-A", "workers.celery_app", "beat", "--loglevel", "INFO", "--schedule"]
        maintenance = Proc("maintenance", [py, *cli, "worker", "--queues", "maintenance"],
                           logs / "worker-maintenance.log")  # fmt: skip
        cpu_workers = [maintenance]
        if args.precompile != "off":
            concurrency = ["--concurrency", str(max(1, args.compile_concurrency))]
            self.compiler = Proc("compile", [py, *cli, "worker", "--compile", *concurrency],
                                 logs / "worker-compile.log")  # fmt: skip
            cpu_workers.append(self.compiler)
        for gpu in [] if args.compile_only else self.gpus:
            argv = [py, *cli, "worker", "--gpu", str(gpu)]
            if args.arch == "host":  # no GPU to read the arch from
                argv += ["--arch", "host"]
            self.workers.append(Proc(f"worker-gpu{gpu}", argv, logs / f"worker-gpu{gpu}.log"))
        self.procs = [
            Proc("api", [py, *cli, "serve", "--port", str(port), "--no-access-log"], logs / "api.log"),
            Proc("beat", [*beat, str(self.work / "beat-schedule")], logs / "beat.log"),
            *cpu_workers,
            *self.workers,
        ]
        t = time.monotonic()
        for proc in self.procs:
            proc.start(env, self.args.out / "stack-pids")
        auth = {"Authorization": f"Bearer {token.strip()}"}
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth)
        wait_http(client, "/healthz", 120, self.procs)
        wait_ready([*cpu_workers, *self.workers], 180)
        self.phase("start_s", t)
        return client

    def sweep(self, client: httpx.Client) -> int:
        """Submit over HTTP, SIGKILL the victim mid-task once it has done some, wait for the end."""
        args = self.args
        assert self.engine is not None
        spec = {
            "arch": args.arch, "phase": "decode", "formats": args.formats.split(","), "profile": args.profile,
            "m": [int(v) for v in args.m.split(",")], "strategy": args.strategy,
            "min_dispatches": args.min_dispatches, "max_dispatches": args.max_dispatches,
            "labels": {"bench": "stack_run"},
        }  # fmt: skip
        submitted = time.monotonic()
        reply = client.post("/v1/sweeps", json=spec, timeout=60)
        if reply.status_code != 202:
            raise RuntimeError(f"POST /v1/sweeps: {reply.status_code} {reply.text[:2000]}")
        status: dict[str, Any] = reply.json()
        sweep_id = int(status["id"])
        self.summary["sweep"] = {"id": sweep_id, "spec": spec, "tasks": status["tasks"]["total"]}
        self.compile_jobs_expected = self.expected_compile_jobs(sweep_id)
        victim = None
        if not args.compile_only and args.kill_gpu in self.gpus:
            victim = self.workers[self.gpus.index(args.kill_gpu)]
        killed: dict[str, Any] | None = None
        killed_at = 0.0
        online: set[int] = set()
        while time.monotonic() < submitted + args.timeout:
            compiler = self.compiler if "compile_wall_s" not in self.phases else None
            if compiler is not None and len(compile_jobs_logged(compiler.log)) >= self.compile_jobs_expected:
                self.phase("compile_wall_s", submitted)  # submit -> the last compile job logged
            if args.compile_only:
                if "compile_wall_s" in self.phases:
                    break
                time.sleep(0.5)
                continue
            status = client.get(f"/v1/sweeps/{sweep_id}", timeout=30).json()
            if status.get("workers_online") is not None:
                online.add(int(status["workers_online"]))
            counts = status["tasks"]
            if killed is None and victim is not None and victim.done_tasks() >= args.kill_after:
                tree = victim.tree()
                held = running_owned_by(self.engine, sweep_id, tree)
                if held:  # mid-task: the kill leaves a running task behind for the reconciler
                    killed = {
                        "worker": victim.name, "gpu": args.kill_gpu, "signal": "SIGKILL",
                        "pids": kill_tree(tree),
                        "seconds_after_submit": round(time.monotonic() - submitted, 1),
                        "tasks_done_before_kill": victim.done_tasks(), "tasks_in_flight": held,
                        "task_counts_at_kill": counts,
                    }  # fmt: skip
                    killed_at = time.monotonic()
            since_kill = time.monotonic() - killed_at
            if killed is not None and victim is not None and "restarted" not in killed \
                    and 0 <= args.restart_killed <= since_kill:  # fmt: skip
                killed["restarted"] = self.restart(victim, round(time.monotonic() - submitted, 1))
            if counts["queued"] == 0 and counts["running"] == 0:
                break
            time.sleep(0.5)
        self.phase("sweep_s", submitted)
        self.summary["sweep"].update(
            {"status": status["status"], "tasks_final": status["tasks"],
             "wall_s": round(self.phases["sweep_s"], 1),
             "kernel": status.get("kernel"), "kernel_version": status.get("kernel_version"),
             "parity_failures": status.get("parity_failures"), "workers_online_seen": sorted(online)}
        )  # fmt: skip
        self.summary["killed_worker"] = killed
        self.summary["tasks_done_per_worker_log"] = {p.name: p.done_tasks() for p in self.workers}
        if args.compile_only:
            if "compile_wall_s" not in self.phases:
                self.failures.append(f"compile jobs not all done within {args.timeout:g} s")
            return sweep_id
        if victim is not None and killed is None:
            self.failures.append("the victim was never killed (too few tasks, or none caught mid-task)")
        if status["tasks"]["queued"] or status["tasks"]["running"]:
            self.failures.append(f"sweep did not finish within {args.timeout:g} s: {status['tasks']}")
        if status["tasks"]["failed"]:
            self.failures.append(f"{status['tasks']['failed']} task(s) failed")
        return sweep_id

    def restart(self, victim: Proc, at_s: float) -> dict[str, Any]:
        """A new worker for the dead one's GPU, same argv, its own log: the supervisor's restart."""
        fresh = Proc(f"{victim.name}-restarted", victim.argv, self.logs / f"{victim.name}-restarted.log",
                     env=dict(victim.env))  # fmt: skip
        fresh.start(self.stack_env, self.args.out / "stack-pids")
        self.workers.append(fresh)
        self.procs.append(fresh)
        return {"worker": fresh.name, "pid": fresh.pid, "seconds_after_submit": at_s}

    def expected_compile_jobs(self, sweep_id: int) -> int:
        """What enqueue_sweep sent to the compile queue for this sweep (workers/precompile.py's rule)."""
        from workers.precompile import compile_jobs

        assert self.engine is not None
        rows = sql_rows(self.engine, "SELECT id, arch, format, kernel, kernel_version, variants FROM tasks "
                        "WHERE sweep_id = :s ORDER BY id", s=sweep_id)  # fmt: skip
        points = [
            (r["id"], r["arch"], r["format"], r["kernel"], r["kernel_version"],
             r["variants"] if isinstance(r["variants"], list) else json.loads(r["variants"]))
            for r in rows
        ]  # fmt: skip
        return len(compile_jobs(points, self.args.precompile))

    def compile_vs_measure(self) -> None:
        """Compile time (the compile worker's jobs) beside measure time (the GPU workers' tasks)."""
        jobs = compile_jobs_logged(self.compiler.log) if self.compiler is not None else []
        per_format: dict[str, float] = {}
        for job in jobs:
            key = f"{job.get('format')}@{job.get('arch')}"
            per_format[key] = round(per_format.get(key, 0.0) + float(job.get("seconds", 0.0)), 1)
        self.summary["compile"] = {
            "worker": None if self.compiler is None else self.compiler.argv[-4:],
            "jobs_expected": self.compile_jobs_expected,
            "jobs_logged": len(jobs),
            "failed_jobs": [j for j in jobs if not j.get("ok")],
            "units_compiled": sum(int(j.get("compiled", 0)) for j in jobs),
            "seconds_per_format": per_format,
            "seconds_total": round(sum(float(j.get("seconds", 0.0)) for j in jobs), 1),
            "wall_s_submit_to_last_job": round(self.phases["compile_wall_s"], 1)
            if "compile_wall_s" in self.phases else None,
            "jobs": jobs,
            "note": "seconds = one job's wall time in the compile worker (a job that found the cubin, or "
            "waited on a GPU worker's compile of it, shows compiled=0); GPU tasks still compile on a miss",
        }  # fmt: skip
        measure = {p.name: task_seconds_all(p.log) for p in self.workers}
        self.summary["measure"] = {
            "task_seconds_total_per_worker": {k: round(sum(v), 1) for k, v in measure.items()},
            "tasks_over_20s_per_worker": {k: sum(1 for x in v if x > 20) for k, v in measure.items()},
            "note": "Celery's 'succeeded in' of run_task; a task over 20 s is one that compiled (or waited "
            "for) its unit: 2.6 s median otherwise on the H200 (2026-12-01)",
        }  # fmt: skip
        failed = self.summary["compile"]["failed_jobs"]
        if failed:
            self.failures.append(f"{len(failed)} compile job(s) failed: {failed}")
        if self.compiler is not None and len(jobs) < self.compile_jobs_expected:
            self.failures.append(f"{len(jobs)} of {self.compile_jobs_expected} compile jobs logged")

    def verify(self, sweep_id: int) -> None:
        """Duplicates, reclaimed tasks, devices, racing's savings: all in SQL."""
        assert self.engine is not None
        found = checks(self.engine, sweep_id)
        self.summary.update(found)
        if any(v for k, v in found["duplicates"].items() if k != "sql"):
            self.failures.append(f"duplicates: {found['duplicates']}")
        killed = self.summary.get("killed_worker")
        if killed:
            lost = set(killed["tasks_in_flight"])
            back = {int(r["id"]) for r in found["reclaimed_tasks"] if r["state"] == "done"}
            if not lost <= back:
                self.failures.append(f"tasks in flight at the kill not done after: {sorted(lost - back)}")
        if self.args.arch != "host" and len(found["tasks_per_device_uuid"]) < len(self.gpus):
            self.failures.append(f"expected {len(self.gpus)} device UUIDs: {found['tasks_per_device_uuid']}")
        spent = sql_rows(self.engine, """
            SELECT t.id, json_array_length(t.variants::json) AS variants, sum(ms.n_dispatches) AS spent
            FROM tasks t JOIN measurements ms ON ms.task_id = t.id WHERE t.sweep_id = :s
            GROUP BY t.id""", s=sweep_id)  # fmt: skip
        budget = sum(int(r["variants"]) * self.args.max_dispatches for r in spent)
        used = sum(int(r["spent"] or 0) for r in spent)
        self.summary["racing"] = {
            "dispatches_stored": used,
            "exhaustive_budget": budget,
            "reduction": round(budget / used, 2) if used else None,
            "note": "budget = variants x max_dispatches per task; what an exhaustive sweep would time",
        }
        log = (self.logs / "worker-maintenance.log").read_text(errors="replace").splitlines()
        passes = [line.strip() for line in log if "reconcile:" in line]
        self.summary["reconciler_log"] = passes[-20:]
        lists = [line.split("'requeued': [")[-1].split("]")[0] for line in passes]
        requeued = {int(i) for ids in lists for i in re.findall(r"\d+", ids)}
        self.summary["requeued_by_reconciler"] = sorted(requeued)
        self.summary["task_seconds_per_worker_log"] = {p.name: task_seconds(p.log) for p in self.workers}

    def nightly(self, client: httpx.Client, broker_url: str) -> None:
        """Send what beat sends at its cron time, now; a new table version must appear."""
        from workers.celery_app import MAINTENANCE_QUEUE, NIGHTLY_TABLES, celery_for

        assert self.engine is not None
        t = time.monotonic()
        top = int(sql_rows(self.engine, "SELECT coalesce(max(id), 0) AS top FROM tables")[0]["top"])
        celery_for(broker_url).send_task(NIGHTLY_TABLES, queue=MAINTENANCE_QUEUE)
        log = self.logs / "worker-maintenance.log"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and "nightly tables:" not in log.read_text(errors="replace"):
            time.sleep(0.5)
        new = sql_rows(self.engine, "SELECT id, arch, phase, dialect, kernel, sha256 FROM tables "
                       "WHERE id > :top ORDER BY id", top=top)  # fmt: skip
        listed = client.get("/v1/tables", params={"arch": self.args.arch}, timeout=30).json()
        self.phase("nightly_s", t)
        lines = log.read_text(errors="replace").splitlines()
        self.summary["nightly"] = {
            "tables_before": top,
            "new_tables": new,
            "listed_over_http": [{"id": i["id"], "dialect": i.get("dialect")} for i in listed["items"]],
            "log": [line for line in lines if "nightly tables:" in line][-2:],
        }
        if not new:
            self.failures.append("the nightly task stored no table")

    def leave_nothing_queued(self, broker_url: str) -> None:
        """--compile-only leaves the GPU tasks' messages behind: empty the Redis DB it found empty."""
        import redis

        left = redis.Redis.from_url(broker_url).llen(f"arch.{self.args.arch}")
        redis.Redis.from_url(broker_url).flushdb()
        self.summary["gpu_messages_dropped"] = int(left)

    def stop(self) -> None:
        self.summary["exit_codes_at_stop"] = {p.name: p.stop() for p in self.procs}
        if self.engine is not None:
            self.engine.dispose()
        if self.servers is not None:
            self.servers.stop()
            for log in self.servers.logs:
                if log.exists():
                    shutil.copy(log, self.logs / log.name)
        elif self.admin_url and not self.args.keep:  # a running Postgres: leave it as it was
            with contextlib.suppress(Exception):
                engine = create_engine(make_url(self.admin_url), isolation_level="AUTOCOMMIT")
                with engine.connect() as connection:
                    connection.execute(text(f'DROP DATABASE IF EXISTS "{self.database_name}" WITH (FORCE)'))
                engine.dispose()
        if self.args.work is None and not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def run(self) -> bool:
        try:
            database_url, broker_url = self.start_servers()
            client = self.start_stack(database_url, broker_url)
            sweep_id = self.sweep(client)
            self.compile_vs_measure()
            if self.args.compile_only:
                self.leave_nothing_queued(broker_url)
            else:
                self.verify(sweep_id)
                self.nightly(client, broker_url)
        except (Exception, SystemExit) as error:  # the summary still says what happened up to here
            self.failures.append(f"{type(error).__name__}: {error}")
        finally:
            self.stop()
            self.phase("total_s", self.t0)
            self.summary["phases_s"] = {k: round(v, 1) for k, v in self.phases.items()}
            self.summary["failures"] = self.failures
            self.summary["ok"] = not self.failures
            path = self.args.out / "stack-summary.json"
            path.write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        return not self.failures


def _interrupted(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds through StackRun.run's cleanup


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    run = StackRun(parse_args())
    ok = run.run()
    keys = ("ok", "failures", "phases_s", "tasks_per_device_uuid", "killed_worker", "duplicates", "racing",
            "measure")  # fmt: skip
    compiled = run.summary.get("compile") or {}
    print(json.dumps({k: v for k, v in compiled.items() if k != "jobs"}, indent=2, default=str))
    print(json.dumps({k: run.summary.get(k) for k in keys}, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
