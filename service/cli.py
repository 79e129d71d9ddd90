"""The `tunebase` command line. Bad arguments exit with code 2 and a clear message."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
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
observed_app = typer.Typer(help="Shapes engines met that their table missed.", no_args_is_help=True)
app.add_typer(observed_app, name="observed")
import_app = typer.Typer(help="Import results measured elsewhere.", no_args_is_help=True)
app.add_typer(import_app, name="import")

console = Console(stderr=True)
_debug = {"on": False}  # set by `tunebase --debug`: errors then keep their traceback


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="show the traceback of connection and HTTP errors"),
) -> None:
    """Tunebase: autotune quantized GEMV/GEMM kernels and emit dispatch tables."""
    _debug["on"] = debug
    try:  # before any command: importing the workers builds the Celery app from the settings
        get_settings()
    except ValidationError as error:
        raise usage_error(settings_problem(error)) from None


def settings_problem(error: ValidationError) -> str:
    """A bad TUNEBASE_* value, named as the user set it (not a pydantic traceback from deep in an import)."""
    parts = []
    for item in error.errors():
        name = "TUNEBASE_" + "_".join(str(p) for p in item.get("loc", ())).upper()
        parts.append(f"{name}={item.get('input')!r}: {item.get('msg', 'invalid')}")
    return "bad setting: " + "; ".join(parts)


# wide enough for a winners table when stdout is a pipe or a CI log (rich assumes 80 columns there)
out = Console(width=None if sys.stdout.isatty() else 150)

DEFAULT_URL = "http://127.0.0.1:8000"
UrlOption = typer.Option(
    DEFAULT_URL, envvar="TUNEBASE_URL", help="API base URL (`tunebase serve` prints the export line)"
)
TokenOption = typer.Option(
    None, envvar="TUNEBASE_TOKEN", help="bearer token (`tunebase token create`); env TUNEBASE_TOKEN"
)
JsonOption = typer.Option(False, "--json", help="machine-readable JSON on stdout")

# the list filters several commands share: one wording (and one arch list) for all of them
ArchFilterOption = typer.Option(None, help="only this arch: gfx906, gfx90a, gfx942, gfx950, sm_90, host")
FormatFilterOption = typer.Option(None, help="only this GGUF format, e.g. Q4_0 (`tunebase formats`)")
MFilterOption = typer.Option(None, min=1, help="only this M (rows of activations)")
NFilterOption = typer.Option(None, min=1, help="only this N (weight rows)")
KFilterOption = typer.Option(None, min=1, help="only this K (reduction length)")


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


def _new_table(columns: tuple[str, ...], title: str | None = None, **column_options: Any) -> Table:
    """A rich table with these column headers (each column gets the same options)."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, **column_options)
    return table


WINNER_COLUMNS = ("M", "N x K", "variant", "median us", "runner-up", "decision")


TIE_CAPTION = (
    "decision: margin over the runner-up with its 95% bootstrap interval; 'tie of n': n variants"
    " not shown apart from the leader by the minimum effect, broken toward the incumbent table,"
    " then the simpler variant"
)


def _decision_text(w: dict[str, Any]) -> str:
    """A decided margin with its interval, or the tie and how it was broken (never a bare negative margin)."""
    if w["runner_up"] is None:
        return "only variant"
    if w["decided"] and w["margin"] is not None:
        text = f"+{100 * w['margin']:.1f}%"
        if w.get("margin_ci"):
            low, high = w["margin_ci"]
            text += f" [{100 * low:.1f}, {100 * high:.1f}]"
        return text
    tied = len(w.get("tie_group") or [])
    return f"tie of {tied}" if tied else "tie"


def _winner_cells(w: dict[str, Any]) -> tuple[str, ...]:
    """The WINNER_COLUMNS cells of one winner row (demo and `tunebase winners` show the same)."""
    return (
        str(w["m"]),
        f"{w['n']}x{w['k']}",
        w["variant"],
        f"{w['median_us']:.2f}",
        w["runner_up"] or "-",
        _decision_text(w),
    )


def _read_payload(files: list[Path], read: Callable[[Path], str], what: str = "") -> list[dict[str, str]]:
    """Each file as {"name", "content"}; a file that cannot be read is a usage error (exit 2)."""
    payload: list[dict[str, str]] = []
    for path in files:
        try:
            payload.append({"name": path.name, "content": read(path)})
        except (OSError, UnicodeDecodeError) as error:
            raise usage_error(f"cannot read {path}{what}: {error}") from None
    return payload


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
    columns = ("format", "shape", *WINNER_COLUMNS)
    table = _new_table(columns, title=f"winners (sweep {result.sweep_id}, {result.device})")
    for w in result.winners:
        table.add_row(w["format"], w["shape"], *_winner_cells(w))
    table.caption = TIE_CAPTION
    out.print(table)
    out.print(f"table: {result.table_path.resolve()}  (sha256 {result.sha256[:12]}; compiles and replays)")


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="interface to listen on (0.0.0.0 = every interface)"),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port of the API and dashboard"),
    migrate: bool = typer.Option(True, help="apply migrations before serving"),
    workers: int = typer.Option(
        1, min=1, max=64, help="API processes; more than one needs a broker or TUNEBASE_EMBEDDED_WORKER=false"
    ),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="log every request"),
) -> None:
    """Start the API; with no broker configured it also runs an embedded worker."""
    import uvicorn

    from service.api.app import create_app
    from service.db.migrate import upgrade

    settings = get_settings()
    if workers > 1 and settings.embedded and settings.embedded_worker:
        raise usage_error("--workers > 1 would start one embedded worker per process; configure a broker "
                          "or set TUNEBASE_EMBEDDED_WORKER=false")  # fmt: skip
    if migrate:
        upgrade(settings.resolved_database_url)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown_host = f"[{shown_host}]" if ":" in shown_host else shown_host
    print(f"export TUNEBASE_URL=http://{shown_host}:{port}", flush=True)
    console.print(f"dashboard: http://{shown_host}:{port}/  (sign in at /login with a read token)")
    if workers > 1:  # each process builds its own app (and its own connection pool) from the environment
        from service.api.listen import run_processes

        run_processes(host, port, workers, access_log)
        return
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", access_log=access_log)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head", help="Alembic revision to reach")) -> None:
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
    from service.text import text_problem

    try:
        scope_list = parse_scopes(scopes)
    except ValueError as error:
        raise usage_error(str(error)) from None
    too_long = "is empty or longer than 120 characters" if not 0 < len(name) <= 120 else None
    problem = text_problem(name) or too_long
    if problem:
        raise usage_error(f"--name {problem}")
    settings = get_settings()
    upgrade(settings.resolved_database_url)
    with session_scope(settings.resolved_database_url) as session:
        token = create_token(session, name, scope_list, settings.token_bytes)
    print(token)


@token_app.command("list")
def token_list(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Every token (never its secret): id, name, scopes, who created it, revoked or not."""
    from service.auth import list_tokens, token_item
    from service.db.migrate import upgrade
    from service.db.session import session_scope

    settings = get_settings()
    upgrade(settings.resolved_database_url)
    with session_scope(settings.resolved_database_url) as session:
        items = [token_item(t) for t in list_tokens(session)]
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table("id", "name", "scopes", "created by", "created", "revoked")
    for item in items:
        revoked = str(item["revoked_at"] or "yes") if item["revoked"] else ""
        scopes = ",".join(str(s) for s in item["scopes"])  # type: ignore[attr-defined]
        table.add_row(str(item["id"]), str(item["name"]), scopes, str(item["created_by"]),
                      str(item["created_at"]), revoked)  # fmt: skip
    out.print(table)


@token_app.command("revoke")
def token_revoke(
    token: str = typer.Argument(..., help="the token's id (see `token list`) or its unique name"),
) -> None:
    """Revoke a token at once; requests carrying it get 401 from then on."""
    from sqlalchemy import select

    from service.auth import revoke_token
    from service.db.migrate import upgrade
    from service.db.models import ApiToken
    from service.db.session import session_scope

    settings = get_settings()
    upgrade(settings.resolved_database_url)
    with session_scope(settings.resolved_database_url) as session:
        if token.isdigit():
            ids = [int(token)]
        else:
            ids = list(session.scalars(select(ApiToken.id).where(ApiToken.name == token)))
        if len(ids) != 1:
            why = "no token has" if not ids else f"{len(ids)} tokens have"
            raise usage_error(f"{why} the id or name {token!r}; see `tunebase token list`")
        record = revoke_token(session, ids[0])
        if record is None:
            raise usage_error(f"no token has the id {token}; see `tunebase token list`")
        out.print(f"token {record.id} ({record.name}) revoked")


def _client(url: str, token: str | None) -> Any:
    from service.client import TunebaseClient

    return _api_call(TunebaseClient, url, token)  # a malformed --url fails here, as one line too


def _api_call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the API; any failure is one line on stderr with a hint (exit 1; 2 for a rejected input)."""
    from service.client import ApiError, ApiUnreachable

    try:
        return function(*args, **kwargs)
    except ApiUnreachable as error:
        if _debug["on"]:
            raise
        _error_line(
            f"cannot reach the Tunebase API at {error.url}: {error.reason}",
            "start it with `tunebase serve`, then pass --url or set TUNEBASE_URL to the URL it prints",
        )
        raise typer.Exit(1) from None
    except ApiError as error:
        if _debug["on"]:
            raise
        body = error.body if isinstance(error.body, dict) else {}
        detail = body.get("error", {}) if body else {}
        message = detail.get("message") if isinstance(detail, dict) else None
        if not message:
            message = " ".join(str(error.body).split())[:160] or "(empty body)"
        _error_line(f"HTTP {error.status}: {message}", _http_hint(error.status))
        for item in detail.get("fields", []) if isinstance(detail, dict) else []:
            console.print(f"  {item['field']}: {item['message']}", markup=False, highlight=False)
        raise typer.Exit(2 if error.status in (400, 409, 413, 422) else 1) from None


def _error_line(message: str, hint: str) -> None:
    console.print(f"error: {message} (hint: {hint})", markup=False, highlight=False, soft_wrap=True)


def _http_hint(status: int) -> str:
    if status == 401:
        return "pass --token or set TUNEBASE_TOKEN; `tunebase token create --name N --scopes read` makes one"
    if status == 403:
        return "this token lacks the scope; create one with `tunebase token create --scopes submit`"
    if status in (404, 405):
        return "check the id or name, and that --url / TUNEBASE_URL points at a Tunebase API"
    if status in (400, 409, 413, 422):
        return "fix the input named below"
    if status >= 500:
        return "the server failed; its log says why"
    return "see the message"


@sweep_app.command("submit")
def sweep_submit(
    spec_file: Path = typer.Argument(..., help="sweep spec JSON file ('-' for stdin)"),
    wait: bool = typer.Option(False, help="follow with a progress bar; non-zero exit on failures"),
    timeout: float | None = typer.Option(
        None, min=0, help="with --wait: give up after this many seconds (exit 4), e.g. no worker serves it"
    ),
    idempotency_key: str | None = typer.Option(
        None, help="Idempotency-Key header: resubmitting the same spec with it returns the same sweep"
    ),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Submit a sweep spec (JSON), e.g. {"arch": "host", "phase": "decode", "formats": ["Q8_0"],
    "profile": "smoke"}.

    Optional fields: shapes (instead of profile), m, variants, strategy (exhaustive or race),
    min_dispatches, max_dispatches, warmup, warm_cache, seed, labels, include_observed.
    `tunebase formats`, `tunebase families` and `tunebase profiles` list the names a spec may use;
    the README section "Writing a sweep spec" explains every field, docs/concepts.md the terms.
    """
    try:
        text = sys.stdin.read() if str(spec_file) == "-" else spec_file.read_text()
        spec = json.loads(text)
    except (OSError, json.JSONDecodeError) as error:
        raise usage_error(f"cannot read spec {spec_file}: {error}") from None
    client = _client(url, token)
    status = _api_call(client.submit_sweep, spec, idempotency_key)
    if not as_json:
        console.print(f"sweep {status['id']}: {status['tasks']['total']} tasks ({status['status']})")
        for warning in status.get("warnings", []):
            console.print(f"warning: {warning}", markup=False, highlight=False)
    if wait:
        status = _follow(client, int(status["id"]), quiet=as_json, timeout=timeout)
    if as_json:
        out.print_json(data=status)
    if wait:
        raise typer.Exit(_outcome_code(status))


# Exit codes of `--wait`, for CI: 0 done and every variant passed parity, 1 the sweep failed or was
# cancelled, 3 it finished but some variant failed parity. 2 stays "bad arguments".
EXIT_SWEEP_FAILED = 1
EXIT_PARITY_FAILED = 3
EXIT_TIMED_OUT = 4  # --timeout passed before the sweep finished


def _outcome_code(status: dict[str, Any]) -> int:
    if status["status"] != "done":
        console.print(f"[red]sweep {status['id']} {status['status']}[/red]")
        return EXIT_SWEEP_FAILED
    failures = int(status.get("parity_failures", 0))
    if failures:
        console.print(f"[red]sweep {status['id']}: {failures} variant measurement(s) failed parity[/red]")
        return EXIT_PARITY_FAILED
    return 0


def _follow(
    client: Any, sweep_id: int, quiet: bool, poll: float = 0.5, timeout: float | None = None
) -> dict[str, Any]:
    """Poll until the sweep finishes; print each new warning once; exit 4 after `timeout` seconds."""
    status: dict[str, Any] = _api_call(client.sweep, sweep_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    shown: list[str] = []
    with progress_bar() as progress:
        bar = progress.add_task(f"sweep {sweep_id}", total=status["tasks"]["total"], visible=not quiet)
        while True:
            tasks = status["tasks"]
            progress.update(bar, completed=tasks["done"] + tasks["failed"] + tasks["cancelled"])
            warnings = list(status.get("warnings", []))
            if warnings != shown:
                for warning in warnings:
                    progress.console.print(f"waiting: {warning}", markup=False, highlight=False)
                shown = warnings
            if status["status"] in ("done", "failed", "cancelled"):
                break
            if deadline is not None and time.monotonic() >= deadline:
                progress.stop()
                why = f": {warnings[0]}" if warnings else ""
                console.print(
                    f"error: sweep {sweep_id} still {status['status']} after --timeout {timeout:g} s{why}",
                    markup=False, highlight=False, soft_wrap=True,
                )  # fmt: skip
                raise typer.Exit(EXIT_TIMED_OUT)
            time.sleep(poll)
            status = _api_call(client.sweep, sweep_id)
    if not quiet:
        tasks = status["tasks"]
        console.print(f"sweep {sweep_id} {status['status']}: {tasks['done']} done, {tasks['failed']} failed")
    return status


@sweep_app.command("status")
def sweep_status(
    sweep_id: int = typer.Argument(..., min=1, help="sweep id (printed by `sweep submit`)"),
    wait: bool = typer.Option(False, help="follow until finished; exit 1 failed, 3 parity failures"),
    timeout: float | None = typer.Option(
        None, min=0, help="with --wait: give up after this many seconds (exit 4)"
    ),
    url: str = UrlOption,
    token: str | None = TokenOption,
    as_json: bool = JsonOption,
) -> None:
    """Status with per-state task counts, parity failures, and why it waits (no worker for its arch)."""
    client = _client(url, token)
    if wait:
        status = _follow(client, sweep_id, quiet=as_json, timeout=timeout)
    else:
        status = _api_call(client.sweep, sweep_id)
    if as_json:
        out.print_json(data=status)
    else:
        tasks = status["tasks"]
        out.print(
            f"sweep {sweep_id}: {status['status']} — "
            + ", ".join(f"{k} {v}" for k, v in tasks.items())
            + f"; parity failures {status.get('parity_failures', 0)}"
        )
        for warning in status.get("warnings", []):
            out.print(f"warning: {warning}", markup=False, highlight=False)
    if wait:
        raise typer.Exit(_outcome_code(status))


@sweep_app.command("list")
def sweep_list(
    status: str | None = typer.Option(None, help="queued, running, done, failed or cancelled"),
    arch: str | None = ArchFilterOption,
    limit: int = typer.Option(20, min=1, max=500, help="at most this many"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Recent sweeps, newest first."""
    page = _api_call(_client(url, token).sweeps, status=status, arch=arch, limit=limit)
    if as_json:
        out.print_json(data=page)
        return
    columns = ("id", "arch", "phase", "status", "done/total", "failed", "parity fail", "created")
    table = _new_table(columns, title=f"{len(page['items'])} of {page['total']} sweeps")
    for s in page["items"]:
        t = s["tasks"]
        table.add_row(
            str(s["id"]),
            s["arch"],
            s["phase"],
            s["status"],
            f"{t['done']}/{t['total']}",
            str(t["failed"]),
            str(s.get("parity_failures", 0)),
            (s["created_at"] or "")[:19],
        )
    out.print(table)


@sweep_app.command("cancel")
def sweep_cancel(
    sweep_id: int = typer.Argument(..., min=1, help="sweep id"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Cancel a sweep's queued tasks; running ones finish and keep their results."""
    status = _api_call(_client(url, token).cancel_sweep, sweep_id)
    out.print(f"sweep {sweep_id}: {status['status']} ({status['cancelled_tasks']} tasks cancelled)")


@app.command()
def winners(
    arch: str | None = ArchFilterOption,
    phase: str | None = typer.Option(None, help="only this phase: decode or prefill"),
    format: str | None = FormatFilterOption,
    m: int | None = MFilterOption,
    n: int | None = NFilterOption,
    k: int | None = KFilterOption,
    kernel: str | None = typer.Option(None, help="only this kernel package's winners"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """List winners with runner-up and margin."""
    filters = {"arch": arch, "phase": phase, "format": format, "m": m, "n": n, "k": k, "kernel": kernel}
    items = _api_call(_client(url, token).winners, **filters)
    if as_json:
        out.print_json(data=items)
        return
    table = _new_table(("arch", "kernel", "format", *WINNER_COLUMNS))
    for w in items:
        table.add_row(w["arch"], w.get("kernel", ""), w["format"], *_winner_cells(w))
    out.print(table)


@app.command()
def compare(
    a: str = typer.Argument(..., help="variant A, e.g. MX1/KB1/RW2/U4/RG1/PG2/PP0"),
    b: str = typer.Argument(..., help="variant B"),
    arch: str = typer.Option(..., help="arch, e.g. gfx906 or host"),
    phase: str = typer.Option("decode", help="decode or prefill"),
    format: str = typer.Option(..., help="GGUF format, e.g. Q4_0 (`tunebase formats`)"),
    m: int = typer.Option(..., min=1, help="M: rows of activations (tokens)"),
    n: int = typer.Option(..., min=1, help="N: weight rows (outputs)"),
    k: int = typer.Option(..., min=1, help="K: reduction length (weights per row)"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """A/B: ratio of medians A/B on one point with its interval and the samples behind it."""
    params = {"arch": arch, "phase": phase, "format": format, "m": m, "n": n, "k": k, "a": a, "b": b}
    result = _api_call(_client(url, token)._call, "GET", "/v1/compare", params=params)
    if as_json:
        out.print_json(data=result)
        return
    ci = result["ratio_ci"]
    interval = f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else " (no interval: summaries only)"
    ratio = f"{result['ratio']:.4f}" if result["ratio"] is not None else "-"
    out.print(f"{a} / {b} = {ratio}{interval}, {result['samples']} samples")
    for side in ("a", "b"):
        s = result[side]
        stale = " (stale)" if s["stale"] else ""
        out.print(f"  {s['variant']}: median {s['median_us']:.3f} us, n={s['n']}{stale}")
    out.print(f"faster: {result['faster'] or 'not distinguishable beyond the minimum effect'}")


def _rows_table(title: str, items: list[dict[str, Any]], columns: list[tuple[str, Any]]) -> Table:
    """A rich table from items, one (header, getter) per column."""
    table = Table(title=title)
    for header, _ in columns:
        table.add_column(header)
    for item in items:
        table.add_row(*(str(get(item)) for _, get in columns))
    return table


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@app.command()
def results(
    arch: str | None = ArchFilterOption,
    phase: str | None = typer.Option(None, help="decode or prefill"),
    format: str | None = FormatFilterOption,
    shape: str | None = typer.Option(None, help="only this shape name, e.g. Qwen36_FFN_GateUp"),
    m: int | None = MFilterOption,
    n: int | None = NFilterOption,
    k: int | None = KFilterOption,
    variant: str | None = typer.Option(None, help="only this variant (`tunebase families`)"),
    sweep: int | None = typer.Option(None, min=1, help="sweep id"),
    parity: bool | None = typer.Option(None, "--parity/--parity-failed", help="only passing / failing"),
    limit: int = typer.Option(50, min=1, max=500, help="at most this many rows"),
    offset: int = typer.Option(0, min=0, help="skip this many rows (paging)"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Measurements (one variant in one task), newest first."""
    if phase is not None and phase not in ("decode", "prefill"):
        raise usage_error(f"--phase must be decode or prefill, not {phase!r}")
    page = _api_call(
        _client(url, token).results,
        arch=arch,
        phase=phase,
        format=format,
        shape=shape,
        m=m,
        n=n,
        k=k,
        variant=variant,
        sweep=sweep,
        parity=None if parity is None else str(parity).lower(),
        limit=limit,
        offset=offset,
    )
    if as_json:
        out.print_json(data=page)
        return
    columns: list[tuple[str, Any]] = [
        ("id", lambda r: r["id"]),
        ("sweep", lambda r: r["sweep_id"]),
        ("arch", lambda r: r["arch"]),
        ("format", lambda r: r["format"]),
        ("M", lambda r: r["m"]),
        ("N x K", lambda r: f"{r['n']}x{r['k']}"),
        ("variant", lambda r: r["variant"]),
        ("median us", lambda r: _us(r["median_us"])),
        ("p10-p90 us", lambda r: f"{_us(r['p10_us'])}-{_us(r['p90_us'])}"),
        ("n", lambda r: r["n_dispatches"]),
        ("parity", lambda r: "pass" if r["parity"]["pass"] else "FAIL"),
    ]
    shown = f"{offset + 1}-{offset + len(page['items'])}" if page["items"] else "0"
    out.print(_rows_table(f"results {shown} of {page['total']}", page["items"], columns))


@app.command()
def dispatches(
    measurement_id: int = typer.Argument(..., min=1, help="measurement id (`tunebase results`)"),
    csv_output: bool = typer.Option(False, "--csv", help="CSV on stdout (every row)"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Per-dispatch rows of one measurement (JSON by default)."""
    client = _client(url, token)
    if csv_output:
        sys.stdout.write(_api_call(client.dispatches_csv, measurement_id))
    else:
        out.print_json(data=_api_call(client.dispatches, measurement_id))


@app.command()
def devices(
    arch: str | None = ArchFilterOption,
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Devices results were measured on."""
    page = _api_call(_client(url, token).devices, arch=arch, limit=500)
    if as_json:
        out.print_json(data=page)
        return
    columns: list[tuple[str, Any]] = [
        (h, lambda d, key=key: d[key])
        for h, key in (
            ("id", "id"),
            ("backend", "backend"),
            ("arch", "arch"),
            ("name", "name"),
            ("CUs", "compute_units"),
            ("driver", "driver_version"),
            ("runtime", "runtime_version"),
        )
    ]
    out.print(_rows_table(f"{page['total']} devices", page["items"], columns))


@app.command()
def profiles(as_json: bool = JsonOption, url: str = UrlOption, token: str | None = TokenOption) -> None:
    """Shape profiles a sweep can name."""
    page = _api_call(_client(url, token).profiles)
    if as_json:
        out.print_json(data=page)
        return
    for profile in page["items"]:
        shapes = ", ".join(f"{s['name']} {s['n']}x{s['k']}" for s in profile["shapes"])
        out.print(f"[bold]{profile['name']}[/bold]: {shapes}")


@observed_app.command("report")
def observed_report(
    arch: str = typer.Option(..., help="arch, e.g. gfx906 or host"),
    format: str = typer.Option(..., help="GGUF format, e.g. Q4_0 (`tunebase formats`)"),
    m: int = typer.Option(..., min=1, help="M: rows of activations (tokens)"),
    n: int = typer.Option(..., min=1, help="N: weight rows (outputs)"),
    k: int = typer.Option(..., min=1, help="K: reduction length (weights per row)"),
    phase: str | None = typer.Option(None, help="default: decode for M <= 4, else prefill"),
    source: str = typer.Option("", help="who met it (engine, host)"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Report a point an engine met that its table missed (deduplicated server-side)."""
    report = {"arch": arch, "format": format, "m": m, "n": n, "k": k, "phase": phase, "source": source}
    item = _api_call(_client(url, token).report_observed, report)
    if as_json:
        out.print_json(data=item)
    else:
        out.print(
            f"observed {item['arch']} {item['phase']} {item['format']} M={item['m']} "
            f"{item['n']}x{item['k']}: seen {item['count']} time(s)"
        )


@observed_app.command("list")
def observed_list(
    arch: str | None = ArchFilterOption,
    format: str | None = FormatFilterOption,
    pending: bool | None = typer.Option(None, "--pending/--offered", help="not yet / already offered"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Observed shapes, most reported first; sweeps with "include_observed": true tune them."""
    page = _api_call(
        _client(url, token).observed,
        arch=arch,
        format=format,
        pending=None if pending is None else str(pending).lower(),
        limit=500,
    )
    if as_json:
        out.print_json(data=page)
        return
    columns: list[tuple[str, Any]] = [
        ("arch", lambda o: o["arch"]),
        ("phase", lambda o: o["phase"]),
        ("format", lambda o: o["format"]),
        ("M (bucket)", lambda o: f"{o['m']} ({o['m_bucket']})"),
        ("N x K", lambda o: f"{o['n']}x{o['k']}"),
        ("count", lambda o: o["count"]),
        ("last seen", lambda o: (o["last_seen"] or "")[:19]),
        ("last sweep", lambda o: o["last_sweep_id"] or "-"),
    ]
    out.print(_rows_table(f"{page['total']} observed shapes", page["items"], columns))


def _dialect_help() -> str:
    from service.tables.dialects import DIALECT_NAMES

    known = ", ".join(DIALECT_NAMES)
    return f"table dialect (default: llaminar-rocm-<phase> if variants fit, else struct-table); {known}"


@table_app.command("generate")
def table_generate(
    arch: str = typer.Option(..., help="arch of the winners, e.g. gfx906 or host"),
    phase: str = typer.Option("decode", help="decode or prefill"),
    dialect: str | None = typer.Option(None, help=_dialect_help()),
    kernel: str | None = typer.Option(None, help="kernel package (name or name@sha); default: built-in"),
    output: Path | None = typer.Option(None, help="write the .inc here"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Generate (and validate) a table version from one kernel package's stored winners."""
    if phase not in ("decode", "prefill"):
        raise usage_error(f"--phase must be decode or prefill, not {phase!r}")
    client = _client(url, token)
    item = _api_call(client.generate_table, arch, phase, dialect, kernel)
    out.print_json(data=item)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(_api_call(client.table_inc, int(item["id"])))
        console.print(f"wrote {output}")


@table_app.command("diff")
def table_diff(
    base: int = typer.Argument(..., help="base table version id"),
    head: int = typer.Argument(..., help="table version id to compare against the base"),
    as_json: bool = JsonOption,
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Entries added, removed and changed from BASE to HEAD, with their regret change."""
    from service.tables.diff import codebook_formats

    client = _client(url, token)
    diff = _api_call(client._call, "GET", f"/v1/tables/{head}/diff", params={"base": base})
    if as_json:
        out.print_json(data=diff)
        return

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:+.2f}%"

    out.print(f"table {base} -> {head}: " + ", ".join(f"{v} {k}" for k, v in diff["counts"].items()))
    for name, values in diff["metrics"].items():
        out.print(f"  {name}: {_metric_text(values['before'])} -> {_metric_text(values['after'])}")
    table = _new_table(("change", "formats (codebook)", "M", "N x K", "before", "after", "regret change"))
    for kind in ("added", "removed"):
        for e in diff[kind]:
            variant = e["variant"] or "-"
            before, after = ("-", variant) if kind == "added" else (variant, "-")
            table.add_row(
                kind, f"{codebook_formats(e['codebook'])} ({e['codebook']})", str(e["m"]),
                f"{e['n']}x{e['k']}", before, after, "",
            )  # fmt: skip
    for e in diff["changed"]:
        before, after = e["before"], e["after"]
        table.add_row(
            "changed", f"{codebook_formats(e['codebook'])} ({e['codebook']})", str(e["m"]),
            f"{e['n']}x{e['k']}",
            f"{before['variant']} ({before['source']})", f"{after['variant']} ({after['source']})",
            pct(e["regret_change"]),
        )  # fmt: skip
    out.print(table)


def _metric_text(value: Any) -> str:
    """Rates and regrets are fractions: shown as percentages with 2 decimals."""
    return f"{100 * value:.2f}%" if isinstance(value, float) else str(value)


@app.command()
def formats(as_json: bool = JsonOption) -> None:
    """GGUF formats a sweep may name, their codebook id (formats sharing one share a table entry) and size."""
    from service.api.routes.registry import format_items

    items = format_items()
    if as_json:
        out.print_json(data=items)
        return
    columns: list[tuple[str, Any]] = [
        ("format", lambda f: f["name"]),
        ("codebook", lambda f: f"{f['codebook']} ({f['codebook_name']})"),
        ("bits/weight", lambda f: f"{f['bits_per_weight']:.2f}"),
        ("block", lambda f: f"{f['block_weights']} w / {f['block_bytes']} B"),
        ("kernels", lambda f: f["kernel_kind"] or "none yet"),
    ]
    out.print(_rows_table(f"{len(items)} formats (docs/concepts.md: codebooks and aliases)", items, columns))


@app.command()
def families(
    backend: str = typer.Option("rocm", help="rocm, cuda or host: the valid space differs per backend"),
    variants: bool = typer.Option(False, "--variants", help="also list every valid variant name"),
    as_json: bool = JsonOption,
) -> None:
    """Built-in kernel packages: variant name pattern, each parameter's meaning and values, the rules.

    Uploaded packages: `tunebase kernel list` / `tunebase kernel show NAME`.
    """
    from kernels.packages.loader import builtin_packages
    from service.api.routes.registry import BACKENDS, family_items

    if backend not in BACKENDS:
        raise usage_error(f"--backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    items = family_items(list(builtin_packages().values()))
    if as_json:
        out.print_json(data=items)
        return
    for family in items:
        space = family["backends"].get(backend)
        if space is None:
            out.print(f"{family['name']} (phase {family['phase']}): no {backend} source", markup=False)
            continue
        names = [v["name"] for v in space["variants"]]
        out.print(
            f"[bold]{family['name']}[/bold] (phase {family['phase']}, backend {backend}): variants "
            f"{family['variant_name']}, {space['count']} valid, e.g. {names[0] if names else '-'}"
        )
        for param in family["params"]:
            meaning = param.get("meaning") or "(no description in the manifest)"
            line = f"  {param['name']}: {meaning}; values {param['values']}"
            out.print(line, markup=False, highlight=False)
        for rule in family["restrictions"]:
            out.print(f"  rule: {rule}", markup=False, highlight=False)
        if variants:
            out.print("  " + " ".join(names), markup=False, highlight=False)


@import_app.command("llaminar-csv")
def import_llaminar_csv(
    files: list[Path] = typer.Argument(..., help="Llaminar trainer CSVs (prefill or decode schema)"),
    arch: str | None = typer.Option(None, help="arch of the rows (default: the backend column, if an arch)"),
    samples: int = typer.Option(
        20, min=1, help="timed runs behind each row's min/mean/stddev, unless the CSV has a samples column"
    ),
    repeats: str = typer.Option(
        "error",
        help="repeated rows of one variant and point: error (pool those agreeing within noise, refuse "
        "the rest) or min (keep the lowest min_us, as Llaminar's analyzer does)",
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Store trainer CSV rows as imported summaries; nothing is stored if any row is bad.

    Winners are judged as the trainer ranks (lowest min_us), a gap counting only when it is beyond
    the rows' own noise (stddev and run count); see the README, "Imported trainer CSVs"."""
    if repeats not in ("error", "min"):
        raise usage_error(f"--repeats must be error or min, not {repeats!r}")
    payload = _read_payload(files, Path.read_text)
    body: dict[str, Any] = {"files": payload, "samples": samples, "repeats": repeats}
    if arch is not None:
        body["arch"] = arch
    result = _api_call(_client(url, token)._call, "POST", "/v1/imports/llaminar-csv", json=body)
    if as_json:
        out.print_json(data=result)
    else:
        out.print(
            f"imported {result['measurements']} measurements at {result['points']} points "
            f"({result['winners']} winners refreshed, {len(result['skipped'])} rows skipped)"
        )
        for note in result.get("repeats", []):
            out.print(f"  repeat: {note}", markup=False, highlight=False)


@import_app.command("rocprof")
def import_rocprof(
    files: list[Path] = typer.Argument(
        ..., help="rocprofv3 kernel_trace.csv / kernel_stats.csv or rocprof results.csv / results.stats.csv"
    ),
    label: str = typer.Option("", help="free text stored with the capture (device, ROCm version, ...)"),
    as_json: bool = typer.Option(False, "--json", help="print the per-kernel summary as JSON"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Store a hand-made rocprof capture (all files or none) and print its per-kernel summary."""
    from service.imports.rocprof import CaptureImportError, parse_files

    payload = _read_payload(files, lambda path: path.read_bytes().decode("utf-8-sig"), " as text")
    try:  # refuse bad files here, with their line numbers, before anything is sent
        parse_files([(f["name"], f["content"]) for f in payload])
    except CaptureImportError as error:
        for problem in error.problems:
            console.print(f"[red]error:[/red] {problem}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    body = {"files": payload, "label": label}
    result = _api_call(_client(url, token)._call, "POST", "/v1/imports/rocprof", json=body)
    if as_json:  # the DESIGN §7 keys, so scripts see the same shape whatever the server adds
        keys = ("kernel", "calls", "median_ns", "min_ns", "max_ns", "total_ns")
        out.print_json(data=[{key: k[key] for key in keys} for k in result["kernels"]])
        return
    kinds = ", ".join(f"{f['name']} ({f['kind']}, {f['rows']} rows)" for f in result["files"])
    columns = ("kernel", "variant", "calls", "median ns", "min ns", "max ns", "total ns", "from")
    table = _new_table(columns, title=f"capture {result['id']}: {kinds}", overflow="fold")

    def cell(value: object) -> str:
        return "-" if value is None else str(value)

    for k in result["kernels"]:
        table.add_row(
            k["kernel"], cell(k.get("variant")), str(k["calls"]), cell(k["median_ns"]), cell(k["min_ns"]),
            cell(k["max_ns"]), str(k["total_ns"]), cell(k.get("source")),
        )  # fmt: skip
    table.caption = "from: dispatches (median of the rows) or statistics file (no median; average only)"
    out.print(table)


@app.command()
def worker(
    gpu: int | None = typer.Option(None, min=0, help="pin to this device index (ROCR_/CUDA_VISIBLE_DEVICES)"),
    arch: str | None = typer.Option(None, help="consume arch.<ARCH> (default: the GPU's arch, else host)"),
    queues: str = typer.Option("", help="extra queues, comma list (e.g. maintenance,compile.cuda)"),
    compile_: bool = typer.Option(
        False, "--compile", help="a CPU worker for the compile queue: no GPU, --concurrency processes"
    ),
    concurrency: int | None = typer.Option(
        None, min=1, help="with --compile: pool processes (default: one per core)"
    ),
    backend: str = typer.Option(
        "", help="with --compile: the backends whose units to compile, comma list (default: all)"
    ),
    loglevel: str = typer.Option("INFO", help="Celery log level"),
) -> None:
    """Run one Celery worker (concurrency 1, prefetch 1, late acks) pinned to one GPU, or with --compile
    a CPU worker that fills the shared artifact cache ahead of the GPU workers of this host."""
    from workers.launch import LaunchError, plan_compile_worker, plan_worker, run_worker

    settings = get_settings()
    if not settings.broker_url:
        raise usage_error("TUNEBASE_BROKER_URL is not set (without a broker, `tunebase serve` runs tasks)")
    extra = [q.strip() for q in queues.split(",") if q.strip()]
    if compile_ and (gpu is not None or arch is not None):
        raise usage_error("--compile runs no GPU work: leave out --gpu and --arch")
    if concurrency is not None and not compile_:
        raise usage_error("--concurrency is for --compile workers (a GPU worker runs one task at a time)")
    backends = [b.strip() for b in backend.split(",") if b.strip()]
    if backends and not compile_:
        raise usage_error("--backend is for --compile workers (a GPU worker's arch sets its backend)")
    try:
        if compile_:
            plan = plan_compile_worker(extra, concurrency, backends)
        else:
            plan = plan_worker(gpu, arch, extra, settings.worker_arch)
    except LaunchError as error:
        raise usage_error(str(error)) from None
    console.print(f"worker {plan.name}: queues {', '.join(plan.queues)}; env {plan.env}")
    run_worker(plan, loglevel)


@app.command("workers")
def workers_command(
    maintenance: bool = typer.Option(
        True, help="also run CPU workers: maintenance, and compile unless TUNEBASE_PRECOMPILE=off"
    ),
    host: bool = typer.Option(False, help="also run a host-arch worker (always when no GPU is found)"),
) -> None:
    """One pinned worker per detected GPU, supervised: a worker that dies is restarted."""
    from workers.gpus import detect_gpus
    from workers.supervisor import Supervisor, host_children

    settings = get_settings()
    if not settings.broker_url:
        raise usage_error("TUNEBASE_BROKER_URL is not set")
    gpus = [(g.index, g.arch) for g in detect_gpus()]
    children = host_children(gpus, host, maintenance, settings.precompile)
    Supervisor(children, echo=console.print).run()


# `tunebase isa` lives beside the ISA readers (issue 9).
from workers.isa.cli import isa as _isa_command  # noqa: E402

app.command("isa")(_isa_command)

# `tunebase kernel push|list|show|analyze` lives beside the package routes' client (issue 12).
from service.kernel_cli import kernel_app as _kernel_app  # noqa: E402

app.add_typer(_kernel_app, name="kernel")


if __name__ == "__main__":
    app()
