"""The data model: every dispatch is a row; everything else summarises or points at them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# SQLite only auto-increments INTEGER PRIMARY KEY; Postgres gets a real bigint for the big tables.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Device(Base):
    """A device as results are keyed (DESIGN §5.6): arch + CU count + driver/runtime."""

    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint("uuid", "driver_version", "runtime_version", name="uq_device_identity"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    backend: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(200))
    compute_units: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str] = mapped_column(String(80))
    driver_version: Mapped[str] = mapped_column(String(80), default="")
    runtime_version: Mapped[str] = mapped_column(String(200), default="")
    hostname: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(primary_key=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    arch: Mapped[str] = mapped_column(String(32), index=True)
    phase: Mapped[str] = mapped_column(String(16))
    kernel: Mapped[str] = mapped_column(String(64), default="", index=True)  # package name (DESIGN §9)
    kernel_version: Mapped[str] = mapped_column(String(64), default="")  # package content sha256
    strategy: Mapped[str] = mapped_column(String(16), default="exhaustive")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    submitted_by: Mapped[str] = mapped_column(String(200), default="")
    # the token that submitted it: its owner (or an admin) may cancel it
    owner_token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    tasks: Mapped[list[Task]] = relationship(back_populates="sweep", order_by="Task.id")


class Task(Base):
    """One (arch, phase, format, shape, M) point; the database, not the broker, knows its state."""

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("sweep_id", "format", "n", "k", "m", name="uq_task_point"),
        Index("ix_tasks_state_arch", "state", "arch"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    arch: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    format: Mapped[str] = mapped_column(String(16))
    shape: Mapped[str] = mapped_column(String(120))
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    m: Mapped[int] = mapped_column(Integer)
    variants: Mapped[list[Any]] = mapped_column(JSON)
    kernel: Mapped[str] = mapped_column(String(64), default="")  # package name (DESIGN §9)
    kernel_version: Mapped[str] = mapped_column(String(64), default="")  # package content sha256
    state: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # when a broker message for this task was last sent; the reconciler re-sends lost ones
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)
    device_id: Mapped[int | None] = mapped_column(ForeignKey("devices.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    sweep: Mapped[Sweep] = relationship(back_populates="tasks")


class Variant(Base):
    __tablename__ = "variants"
    __table_args__ = (UniqueConstraint("family", "name", name="uq_variant_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    family: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(80))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    declared_order: Mapped[int] = mapped_column(Integer, default=0)


class Artifact(Base):
    """A compiled unit in the content-addressed cache (one per family x format x arch x toolchain)."""

    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(primary_key=True)
    cache_key: Mapped[str] = mapped_column(String(80), unique=True)
    backend: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(32))
    family: Mapped[str] = mapped_column(String(32))
    format: Mapped[str] = mapped_column(String(16))
    source_hash: Mapped[str] = mapped_column(String(80))
    toolchain: Mapped[str] = mapped_column(String(300))
    flags: Mapped[list[Any]] = mapped_column(JSON)
    path: Mapped[str] = mapped_column(String(500))
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    log: Mapped[str] = mapped_column(Text, default="")
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Measurement(Base):
    """One variant in one task on one device: summary statistics, parity, provenance."""

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint("task_id", "variant_id", name="uq_measurement_task_variant"),
        Index("ix_measurements_point", "arch", "phase", "format", "m", "n", "k", "kernel"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id"))
    artifact_id: Mapped[int | None] = mapped_column(ForeignKey("artifacts.id"))
    device_id: Mapped[int | None] = mapped_column(ForeignKey("devices.id"))
    arch: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    format: Mapped[str] = mapped_column(String(16))
    codebook: Mapped[int] = mapped_column(Integer)
    shape: Mapped[str] = mapped_column(String(120))
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    m: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(24), default="sweep")  # sweep | llaminar-csv | rocprof
    kernel: Mapped[str] = mapped_column(String(64), default="")  # package name (DESIGN §9)
    kernel_version: Mapped[str] = mapped_column(String(64), default="")  # package content sha256
    source_hash: Mapped[str] = mapped_column(String(80), default="")
    toolchain: Mapped[str] = mapped_column(String(300), default="")
    n_dispatches: Mapped[int] = mapped_column(Integer, default=0)
    # imported summaries (no dispatch rows): timed runs behind min/mean/stddev, when known
    summary_samples: Mapped[int | None] = mapped_column(Integer)
    median_us: Mapped[float | None] = mapped_column(Float)
    min_us: Mapped[float | None] = mapped_column(Float)
    p10_us: Mapped[float | None] = mapped_column(Float)
    p90_us: Mapped[float | None] = mapped_column(Float)
    mean_us: Mapped[float | None] = mapped_column(Float)
    stddev_us: Mapped[float | None] = mapped_column(Float)
    cv: Mapped[float | None] = mapped_column(Float)
    wall_median_us: Mapped[float | None] = mapped_column(Float)
    cosine: Mapped[float | None] = mapped_column(Float)
    rel_l2: Mapped[float | None] = mapped_column(Float)
    max_abs: Mapped[float | None] = mapped_column(Float)
    parity_pass: Mapped[bool] = mapped_column(Boolean, default=False)
    parity_sampled_rows: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    variant: Mapped[Variant] = relationship()


class Dispatch(Base):
    """One timed kernel launch. Device time (profiler or in-harness clock) and wall time side by side.

    Keyed by (measurement_id, seq), seq being the launch's place in its task (unique per measurement):
    no surrogate id, so the primary key is the one index, and it serves every read (one measurement's
    rows in seq order). The bulk of the database lives here: each B-tree costs COPY about as much as the heap.
    On SQLite the table is WITHOUT ROWID: the key's B-tree holds the rows, clustered by measurement.
    """

    __tablename__ = "dispatches"
    __table_args__ = (
        PrimaryKeyConstraint("measurement_id", "seq", name="pk_dispatches"),
        {"sqlite_with_rowid": False},
    )

    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer, autoincrement=False)
    device_ns: Mapped[int] = mapped_column(BigInteger)
    wall_ns: Mapped[int | None] = mapped_column(BigInteger)
    buffer_index: Mapped[int] = mapped_column(Integer, default=0)
    event_ns: Mapped[int | None] = mapped_column(BigInteger)  # CUDA events beside CUPTI (cuda backend)


class Winner(Base):
    __tablename__ = "winners"
    __table_args__ = (
        UniqueConstraint("arch", "phase", "kernel", "format", "m", "n", "k", name="uq_winner_point"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    arch: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    format: Mapped[str] = mapped_column(String(16))
    codebook: Mapped[int] = mapped_column(Integer)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    shape: Mapped[str] = mapped_column(String(120))
    variant: Mapped[str] = mapped_column(String(80))
    kernel: Mapped[str] = mapped_column(String(64), default="")  # package name (DESIGN §9)
    kernel_version: Mapped[str] = mapped_column(String(64), default="")  # package content sha256
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"))
    median_us: Mapped[float] = mapped_column(Float)
    runner_up: Mapped[str | None] = mapped_column(String(80))
    runner_up_median_us: Mapped[float | None] = mapped_column(Float)
    margin: Mapped[float | None] = mapped_column(Float)
    margin_ci_lo: Mapped[float | None] = mapped_column(Float)
    margin_ci_hi: Mapped[float | None] = mapped_column(Float)
    decided: Mapped[bool] = mapped_column(Boolean, default=False)
    tie_group: Mapped[list[Any]] = mapped_column(JSON, default=list)
    sweep_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TableVersion(Base):
    __tablename__ = "tables"
    __table_args__ = (Index("ix_tables_target", "arch", "phase", "kernel", "dialect"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    arch: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    dialect: Mapped[str] = mapped_column(String(40))
    kernel: Mapped[str] = mapped_column(String(64), default="")  # package name the winners are of (DESIGN §9)
    kernel_version: Mapped[str] = mapped_column(String(64), default="")  # package whose [table] shaped it
    sha256: Mapped[str] = mapped_column(String(64))
    content: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    entries: Mapped[list[Any]] = mapped_column(JSON, default=list)
    sweep_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("tables.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiToken(Base):
    """Bearer tokens, stored as SHA-256 digests: a leaked database leaks no usable token."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str] = mapped_column(String(120), default="", server_default="")  # cli or a token
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ObservedShape(Base):
    """A (arch, phase, format, M, N, K) an engine met that its table missed (DESIGN §5.7); deduplicated."""

    __tablename__ = "observed_shapes"
    __table_args__ = (
        UniqueConstraint("arch", "phase", "format", "m", "n", "k", name="uq_observed_point"),
        Index("ix_observed_arch_phase", "arch", "phase"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    arch: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    format: Mapped[str] = mapped_column(String(16))
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer, default=1)
    source: Mapped[str] = mapped_column(String(120), default="")
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id", ondelete="SET NULL"))


class Capture(Base):
    """A profiler capture made by hand (rocprof / rocprofv3 files), imported as it was (issue 9 part 4)."""

    __tablename__ = "captures"

    id: Mapped[int] = mapped_column(primary_key=True)
    tool: Mapped[str] = mapped_column(String(24), default="rocprof")
    label: Mapped[str] = mapped_column(String(200), default="")
    files: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{"name", "kind", "rows"}]
    imported_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CaptureDispatch(Base):
    """One dispatch row of an imported capture, on the profiler's own clock (ns)."""

    __tablename__ = "capture_dispatches"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    capture_id: Mapped[int] = mapped_column(ForeignKey("captures.id", ondelete="CASCADE"), index=True)
    file_index: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    kernel: Mapped[str] = mapped_column(Text)
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    duration_ns: Mapped[int] = mapped_column(BigInteger)
    agent: Mapped[str] = mapped_column(String(80), default="")
    queue: Mapped[str] = mapped_column(String(80), default="")
    dispatch_id: Mapped[int | None] = mapped_column(BigInteger)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class CaptureKernelStat(Base):
    """One row of a per-kernel statistics file (kernel_stats.csv / results.stats.csv) of a capture."""

    __tablename__ = "capture_kernel_stats"

    id: Mapped[int] = mapped_column(primary_key=True)
    capture_id: Mapped[int] = mapped_column(ForeignKey("captures.id", ondelete="CASCADE"), index=True)
    file_index: Mapped[int] = mapped_column(Integer)
    kernel: Mapped[str] = mapped_column(Text)
    calls: Mapped[int] = mapped_column(BigInteger)
    total_ns: Mapped[int] = mapped_column(BigInteger)
    average_ns: Mapped[float] = mapped_column(Float)
    percentage: Mapped[float] = mapped_column(Float)
    min_ns: Mapped[int | None] = mapped_column(BigInteger)
    max_ns: Mapped[int | None] = mapped_column(BigInteger)
    stddev_ns: Mapped[float | None] = mapped_column(Float)


class KernelPackageRow(Base):
    """An uploaded kernel package (DESIGN §9), content-addressed: the same files are the same version."""

    __tablename__ = "kernel_packages"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_kernel_package_version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[str] = mapped_column(String(64))
    phase: Mapped[str] = mapped_column(String(16))
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    files: Mapped[dict[str, Any]] = mapped_column(JSON)  # {relative path: base64 bytes}
    size_bytes: Mapped[int] = mapped_column(Integer)
    variants: Mapped[int] = mapped_column(Integer)
    invalid: Mapped[list[Any]] = mapped_column(JSON, default=list)
    uploaded_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class KernelAnalysis(Base):
    """Per-variant ISA resources of a package compiled for one arch without a GPU (the pre-screen)."""

    __tablename__ = "kernel_analyses"
    __table_args__ = (
        UniqueConstraint("kernel", "kernel_version", "arch", "format", "variant", name="uq_kernel_analysis"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel: Mapped[str] = mapped_column(String(64), index=True)
    kernel_version: Mapped[str] = mapped_column(String(64))
    arch: Mapped[str] = mapped_column(String(32))
    format: Mapped[str] = mapped_column(String(16))
    variant: Mapped[str] = mapped_column(String(80))
    symbol: Mapped[str] = mapped_column(String(200))
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    error: Mapped[str | None] = mapped_column(Text)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    toolchain: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReadGeneration(Base):
    """One row whose value moves whenever what the cached reads show changes (service/api/read_cache.py).

    Database triggers (migration 0010) bump it in the same transaction as any insert, update or delete
    on the WATCHED tables, whoever writes, so no writer can forget to.
    """

    __tablename__ = "read_generation"
    WATCHED: ClassVar[tuple[str, ...]] = ("winners", "sweeps", "tasks", "measurements", "tables")

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
