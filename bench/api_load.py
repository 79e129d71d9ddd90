"""The API under load: N concurrent keep-alive clients per endpoint against `tunebase serve` on Postgres.

Setup (bounded): a fresh Postgres database holding --rows dispatch rows (COPY) over 180 decode points
x 3 variants, their winners decided by the real statistics, one read token. Then, per endpoint, --clients
concurrent clients send requests back to back for --seconds over loopback (one asyncio process, raw
HTTP/1.1 keep-alive, so the load generator costs little CPU beside the server on the same machine).
CSV downloads are checked row by row against the stored count. Prints JSON: req/s, latency percentiles,
errors, with machine, date and command. Only 127.0.0.1 is ever contacted.
Usage: .venv/bin/python bench/api_load.py [--rows N] [--clients C] [--seconds S] [--workers W]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.auth import create_token  # noqa: E402
from service.db.migrate import upgrade  # noqa: E402
from service.db.models import Measurement, Sweep, Task, Variant  # noqa: E402
from service.db.session import session_factory  # noqa: E402
from service.winners import refresh_point  # noqa: E402
from workers.bulk import DispatchRow, insert_dispatch_rows  # noqa: E402

ADMIN_URL = os.environ.get("TUNEBASE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
FORMATS = ("Q8_0", "Q4_0", "Q4_1")  # codebooks 19, 0, 5; 32-weight blocks
CODEBOOK = {"Q8_0": 19, "Q4_0": 0, "Q4_1": 5}
SHAPES = [(f"Load_{i}", 256 * (i + 1), 512 * (1 + i % 5)) for i in range(15)]
VARIANTS = ("MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U2/RG1/PG0/PP0", "MX4/KB4/RW2/U4/RG1/PG0/PP0")
TARGETS = {"winners_rps": 500, "winners_p99_ms": 100, "dashboard_rps": 100}


def seed(url: str, rows: int) -> tuple[list[int], int, str]:
    """180 points x 3 variants; returns (measurement ids, rows per measurement, a read token)."""
    points = [(f, s, m) for f in FORMATS for s in SHAPES for m in (1, 2, 3, 4)]
    per = -(-rows // (len(points) * len(VARIANTS)))
    factory = session_factory(url)
    rng = random.Random(0)
    with factory.begin() as session:
        sweep = Sweep(arch="host", phase="decode", spec={}, labels={"bench": "api_load"}, status="done")
        session.add(sweep)
        session.flush()
        variants = [
            Variant(family="decode", name=v, params={}, declared_order=i) for i, v in enumerate(VARIANTS)
        ]
        session.add_all(variants)
        session.flush()
        measurements: list[Measurement] = []
        for fmt, (shape, n, k), m in points:
            task = Task(
                sweep_id=sweep.id,
                arch="host",
                phase="decode",
                format=fmt,
                shape=shape,
                n=n,
                k=k,
                m=m,
                variants=list(VARIANTS),
                state="done",
                attempts=1,
            )
            session.add(task)
            session.flush()
            for index, variant in enumerate(variants):
                median = 20.0 * (1 + 0.05 * ((index + n // 256) % 3))
                measurements.append(
                    Measurement(
                        task_id=task.id,
                        sweep_id=sweep.id,
                        variant_id=variant.id,
                        arch="host",
                        phase="decode",
                        format=fmt,
                        codebook=CODEBOOK[fmt],
                        shape=shape,
                        n=n,
                        k=k,
                        m=m,
                        n_dispatches=per,
                        median_us=median,
                        parity_pass=True,
                    )
                )
        session.add_all(measurements)
        session.flush()
        batch: list[DispatchRow] = []
        for measurement in measurements:
            base = int((measurement.median_us or 20.0) * 1000)
            for seq in range(per):
                device = base + rng.randrange(-400, 400)
                batch.append((measurement.id, seq, device, device + 3000, seq % 8, None))
            if len(batch) >= 200_000:
                insert_dispatch_rows(session, batch)
                batch = []
        insert_dispatch_rows(session, batch)
        ids = [m.id for m in measurements]
    with factory.begin() as session:
        for fmt, (_, n, k), m in points:
            refresh_point(session, "host", "decode", fmt, m, n, k)
        token = create_token(session, "bench", ["read"])
    return ids, per, token


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def fetch(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    """One keep-alive HTTP/1.1 exchange; Content-Length or chunked bodies."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:  # chunked
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            parts.append(chunk[:-2])
        body = b"".join(parts)
    return status, body


async def load(
    port: int, path: str, token: str, clients: int, seconds: float, expect_rows: int | None
) -> dict[str, Any]:
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nAccept: */*\r\n\r\n"
    ).encode()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    status, body = await fetch(reader, writer, request)
                except (OSError, asyncio.IncompleteReadError, ValueError) as error:
                    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                elif expect_rows is not None and body.count(b"\n") - 1 != expect_rows:
                    errors["incomplete_csv"] = errors.get("incomplete_csv", 0) + 1
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - began
    latencies.sort()

    def pct(q: float) -> float | None:
        return (
            round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1)
            if latencies
            else None
        )

    return {
        "path": path.split("?")[0] if "csv" not in path else path,
        "requests": len(latencies),
        "seconds": round(elapsed, 2),
        "req_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * latencies[-1], 1) if latencies else None,
        "errors": errors,
    }


def start_server(url: str, port: int, workers: int, home: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TUNEBASE_DATABASE_URL": url,
        "TUNEBASE_EMBEDDED_WORKER": "false",
        "TUNEBASE_BROKER_URL": "",
        "TUNEBASE_HOME": str(home),
    }
    argv = [
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
    ]
    process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                time.sleep(1.0)  # let every worker process finish starting
                return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    args = parser.parse_args()

    name = f"tunebase_load_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
        server_version = connection.scalar(text("SHOW server_version"))
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    results: list[dict[str, Any]] = []
    server = None
    try:
        upgrade(url)
        setup_start = time.perf_counter()
        ids, per, token = seed(url, args.rows)
        setup_seconds = time.perf_counter() - setup_start
        session_factory(url).kw["bind"].dispose()
        port = free_port()
        home = Path(os.environ.get("TMPDIR", "/tmp")) / name
        home.mkdir(parents=True, exist_ok=True)
        server = start_server(url, port, args.workers, home)
        endpoints = [
            ("/v1/winners", None, args.clients),
            ("/", None, args.clients),
            ("/v1/sweeps", None, args.clients),
            (f"/v1/measurements/{ids[0]}/dispatches?format=csv", per, args.clients),
        ]
        for path, rows, clients in endpoints:
            results.append(asyncio.run(load(port, path, token, clients, args.seconds, rows)))
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    winners, dashboard = results[0], results[1]
    print(
        json.dumps(
            {
                "bench": "api_load",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "hostname": platform.node(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average_at_end": os.getloadavg(),
                },
                "command": " ".join([".venv/bin/python", "bench/api_load.py", *sys.argv[1:]]),
                "database": f"postgres {server_version}",
                "dispatch_rows": per * len(ids),
                "winners": 180,
                "setup_seconds": round(setup_seconds, 1),
                "clients": args.clients,
                "seconds_per_endpoint": args.seconds,
                "server_workers": args.workers,
                "targets": TARGETS,
                "met": {
                    "winners": bool(
                        winners["req_per_s"] >= TARGETS["winners_rps"]
                        and (winners["p99_ms"] or 1e9) <= TARGETS["winners_p99_ms"]
                    ),
                    "dashboard": bool(dashboard["req_per_s"] >= TARGETS["dashboard_rps"]),
                    "csv_all_complete": not results[3]["errors"],
                },
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
