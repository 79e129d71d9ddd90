"""The `tunebase` command line. Bad arguments exit with code 2 and a clear message."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from service.config import get_settings

app = typer.Typer(
    help="Tunebase: autotune quantized GEMV/GEMM kernels and emit dispatch tables.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
sweep_app = typer.Typer(help="Submit and follow sweeps over HTTP.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
table_app = typer.Typer(help="Dispatch tables.", no_args_is_help=True)
app.add_typer(sweep_app, name="sweep")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")
app.add_typer(table_app, name="table")

console = Console(stderr=True)
out = Console()

UrlOption = typer.Option("http://127.0.0.1:8000", envvar="TUNEBASE_URL", help="API base URL")
TokenOption = typer.Option(None, envvar="TUNEBASE_TOKEN", help="bearer token")


def usage_error(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    )


@app.command()
def demo(
    formats: str = typer.Option("Q8_0,Q4_0", help="comma list of formats"),
    profile: str = typer.Option("smoke", help="shape profile"),
    dispatches: int = typer.Option(20, min=3, help="timed dispatches per variant"),
    output: Path | None = typer.Option(
        None, help="where to write the .inc (default: <home>/tables/host-decode.inc)"
    ),
) -> None:
    """Run a smoke sweep on the embedded default (SQLite, in-process worker), print winners, emit a table."""
    from service.demo import run_demo

    settings = get_settings()
    output = output or settings.home / "tables" / "host-decode.inc"
    try:
        result = run_demo(
            settings,
            [f.strip() for f in formats.split(",") if f.strip()],
            profile,
            dispatches,
            output,
            console,
        )
    except ValueError as error:
        raise usage_error(str(error)) from None
    table = Table(title=f"winners (sweep {result.sweep_id}, {result.device})")
    for column in ("format", "shape", "M", "N x K", "variant", "median us", "runner-up", "margin"):
        table.add_column(column)
    for w in result.winners:
        margin = f"{100 * w['margin']:.1f}%" if w["margin"] is not None else "-"
        table.add_row(
            w["format"],
            w["shape"],
            str(w["m"]),
            f"{w['n']}x{w['k']}",
            w["variant"],
            f"{w['median_us']:.2f}",
            w["runner_up"] or "-",
            margin,
        )
    out.print(table)
    out.print(
        f"table: {result.table_path.resolve()}  (sha256 {result.sha256[:12]}; compiles and replays)"
    )


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000, min=1, max=65535),
    migrate: bool = typer.Option(True, help="apply migrations before serving"),
) -> None:
    """Start the API; with no broker configured it also runs an embedded worker."""
    import uvicorn

    from service.api.app import create_app
    from service.db.migrate import upgrade

    settings = get_settings()
    if migrate:
        upgrade(settings.resolved_database_url)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply Alembic migrations to TUNEBASE_DATABASE_URL."""
    from service.db.migrate import upgrade

    upgrade(get_settings().resolved_database_url, revision)
    out.print(f"database at {revision}")


@token_app.command("create")
def token_create(
    name: str = typer.Option(..., help="who or what holds the token"),
    scopes: str = typer.Option("read", help="comma list of read, submit, admin"),
) -> None:
    """Create a token; it is printed once on stdout and stored only as a hash."""
    from service.auth import create_token, parse_scopes
    from service.db.migrate import upgrade
    from service.db.session import session_scope

    try:
        scope_list = parse_scopes(scopes)
    except ValueError as error:
        raise usage_error(str(error)) from None
    settings = get_settings()
    upgrade(settings.resolved_database_url)
    with session_scope(settings.resolved_database_url) as session:
        token = create_token(session, name, scope_list, settings.token_bytes)
    print(token)


def _client(url: str, token: str | None) -> Any:
    from service.client import TunebaseClient

    return TunebaseClient(url, token)


def _api_call(function: Any, *args: Any, **kwargs: Any) -> Any:
    from service.client import ApiError

    try:
        return function(*args, **kwargs)
    except ApiError as error:
        console.print(f"[red]error:[/red] {error}")
        body = error.body if isinstance(error.body, dict) else {}
        for item in body.get("error", {}).get("fields", []):
            console.print(f"  {item['field']}: {item['message']}")
        raise typer.Exit(2 if error.status in (400, 409, 422) else 1) from None
    except OSError as error:
        console.print(f"[red]error:[/red] cannot reach the API: {error}")
        raise typer.Exit(1) from None


@sweep_app.command("submit")
def sweep_submit(
    spec_file: Path = typer.Argument(..., help="sweep spec JSON file ('-' for stdin)"),
    wait: bool = typer.Option(False, help="follow with a progress bar; non-zero exit on failures"),
    idempotency_key: str | None = typer.Option(None, help="Idempotency-Key header"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Submit a sweep (DESIGN §7 wire shape)."""
    try:
        text = sys.stdin.read() if str(spec_file) == "-" else spec_file.read_text()
        spec = json.loads(text)
    except (OSError, json.JSONDecodeError) as error:
        raise usage_error(f"cannot read spec {spec_file}: {error}") from None
    client = _client(url, token)
    status = _api_call(client.submit_sweep, spec, idempotency_key)
    if not as_json:
        console.print(f"sweep {status['id']}: {status['tasks']['total']} tasks ({status['status']})")
    if wait:
        status = _follow(client, int(status["id"]), quiet=as_json)
    if as_json:
        out.print_json(data=status)
    if wait and status["status"] != "done":
        raise typer.Exit(1)


def _follow(client: Any, sweep_id: int, quiet: bool, poll: float = 0.5) -> dict[str, Any]:
    status: dict[str, Any] = _api_call(client.sweep, sweep_id)
    with progress_bar() as progress:
        bar = progress.add_task(f"sweep {sweep_id}", total=status["tasks"]["total"], visible=not quiet)
        while True:
            tasks = status["tasks"]
            progress.update(bar, completed=tasks["done"] + tasks["failed"] + tasks["cancelled"])
            if status["status"] in ("done", "failed", "cancelled"):
                break
            time.sleep(poll)
            status = _api_call(client.sweep, sweep_id)
    if not quiet:
        tasks = status["tasks"]
        console.print(f"sweep {sweep_id} {status['status']}: {tasks['done']} done, {tasks['failed']} failed")
    return status


@sweep_app.command("status")
def sweep_status(
    sweep_id: int,
    url: str = UrlOption,
    token: str | None = TokenOption,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    status = _api_call(_client(url, token).sweep, sweep_id)
    if as_json:
        out.print_json(data=status)
    else:
        tasks = status["tasks"]
        out.print(
            f"sweep {sweep_id}: {status['status']} — " + ", ".join(f"{k} {v}" for k, v in tasks.items())
        )


@sweep_app.command("cancel")
def sweep_cancel(sweep_id: int, url: str = UrlOption, token: str | None = TokenOption) -> None:
    status = _api_call(_client(url, token).cancel_sweep, sweep_id)
    out.print(f"sweep {sweep_id}: {status['status']} ({status['cancelled_tasks']} tasks cancelled)")


@app.command()
def winners(
    arch: str | None = None,
    phase: str | None = None,
    format: str | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    as_json: bool = typer.Option(False, "--json"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """List winners with runner-up and margin."""
    items = _api_call(_client(url, token).winners, arch=arch, phase=phase, format=format, m=m, n=n, k=k)
    if as_json:
        out.print_json(data=items)
        return
    table = Table()
    for column in ("arch", "format", "M", "N x K", "variant", "median us", "runner-up", "margin", "decided"):
        table.add_column(column)
    for w in items:
        margin = f"{100 * w['margin']:.1f}%" if w["margin"] is not None else "-"
        table.add_row(
            w["arch"],
            w["format"],
            str(w["m"]),
            f"{w['n']}x{w['k']}",
            w["variant"],
            f"{w['median_us']:.2f}",
            w["runner_up"] or "-",
            margin,
            str(w["decided"]),
        )
    out.print(table)


@table_app.command("generate")
def table_generate(
    arch: str = typer.Option(...),
    phase: str = typer.Option("decode"),
    dialect: str = typer.Option("llaminar-rocm-decode"),
    output: Path | None = typer.Option(None, help="write the .inc here"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Generate (and validate) a table version from the stored winners."""
    client = _client(url, token)
    item = _api_call(client.generate_table, arch, phase, dialect)
    out.print_json(data=item)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(_api_call(client.table_inc, int(item["id"])))
        console.print(f"wrote {output}")


if __name__ == "__main__":
    app()
