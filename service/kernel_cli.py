"""`tunebase kernel push|list|show|analyze`: kernel packages over HTTP (DESIGN §9).

`push` validates the folder here first (same loader and limits as the server), so a bad manifest is
refused with its key before anything is sent. `analyze DIR` pre-screens a local folder without a server
(nothing stored); `analyze NAME[@VERSION]` asks the server, which stores the results. Errors are one line;
bad input exits 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

kernel_app = typer.Typer(help="Kernel packages: push, list, show, ISA pre-screen.", no_args_is_help=True)

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)
UrlOption = typer.Option("http://127.0.0.1:8000", envvar="TUNEBASE_URL", help="API base URL")
TokenOption = typer.Option(None, envvar="TUNEBASE_TOKEN", help="bearer token")
ANALYZE_TIMEOUT_S = 3600.0  # the server compiles every variant before it answers
BAD_INPUT = (400, 404, 409, 413, 422)


def fail(message: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """One API call; an error is one line (the server's message), exit 2 for bad input, else 1."""
    from service.client import ApiError

    try:
        return function(*args, **kwargs)
    except ApiError as error:
        body = error.body if isinstance(error.body, dict) else {}
        message = body.get("error", {}).get("message") or str(error.body)[:300]
        raise fail(f"HTTP {error.status}: {message}", 2 if error.status in BAD_INPUT else 1) from None
    except OSError as error:
        raise fail(f"cannot reach the API: {error}", 1) from None


def _client(url: str, token: str | None) -> Any:
    from service.client import TunebaseClient

    return TunebaseClient(url, token)


def split_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    return name, version or None


@kernel_app.command("push")
def push(
    folder: Path = typer.Argument(..., help="the package folder (holds tunebase-kernel.toml)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Upload a package folder; the same files always get the same version."""
    from kernels.packages.archive import PackageArchiveError, read_folder, write_archive
    from kernels.packages.loader import load_files
    from kernels.packages.manifest import ManifestError

    try:
        files = read_folder(folder)
        load_files(files, folder)
    except (PackageArchiveError, ManifestError) as error:
        raise fail(f"{folder}: {error}") from None
    result = _call(_client(url, token).push_kernel, write_archive(files))
    if as_json:
        out.print_json(data=result)
        return
    state = "stored" if result["created"] else "already stored"
    backends = ", ".join(f"{b} {n}" for b, n in result["backends"].items())
    invalid = len(result["invalid"])
    out.print(
        f"{result['ref']} {state}: {result['variants']} variants ({backends}), {invalid} invalid points"
    )


@kernel_app.command("list")
def list_kernels(
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Built-in and uploaded packages with their newest version."""
    result = _call(_client(url, token).kernels)
    if as_json:
        out.print_json(data=result)
        return
    table = Table(title="kernel packages")
    for column in ("name", "phase", "kind", "newest", "variants", "versions", "uploaded"):
        table.add_column(column)
    for item in result["items"]:
        newest = item["versions"][0]
        table.add_row(
            item["name"], item["phase"], "built-in" if item["builtin"] else "uploaded", newest["ref"],
            str(newest["variants"]), str(len(item["versions"])), newest["created_at"] or "-",
        )  # fmt: skip
    out.print(table)


@kernel_app.command("show")
def show(
    ref: str = typer.Argument(..., help="NAME or NAME@<sha256 prefix>"),
    arch: str | None = typer.Option(None, help="only this arch's stored analyses"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """A package's versions, then one version's parameters, files and stored analyses."""
    name, version = split_ref(ref)
    client = _client(url, token)
    versions = _call(client.kernel, name)
    detail = _call(client.kernel_version, name, version or versions["latest"], arch)
    if as_json:
        out.print_json(data={"versions": versions["versions"], **detail})
        return
    d = detail["describe"]
    out.print(
        f"[bold]{detail['ref']}[/bold] {detail['phase']} ({'built-in' if detail['builtin'] else 'uploaded'})"
    )
    if d.get("description"):
        out.print(d["description"])
    out.print(
        f"formats: {', '.join(d['formats'])}; weights: {d['weights']}; variant names: {d['variant_name']}"
    )
    out.print("variants: " + ", ".join(f"{b} {n}" for b, n in detail["variants"].items()))
    for p in d["params"]:
        out.print(f"  {p['name']} = {p['values']}  {p['meaning']}")
    for rule in d["restrictions"]:
        out.print(f"  rule: {rule}")
    out.print("files: " + ", ".join(f"{f['path']} ({f['bytes']} B)" for f in detail["files"]))
    out.print("versions: " + ", ".join(v["ref"] for v in versions["versions"]))
    if detail["analyses"]:
        print_analyses(detail["analyses"], "stored ISA analyses")


def first_error_line(log: str | None) -> str:
    """The compiler's first ``error:`` line (what an author needs first), else the log's last line."""
    lines = [line.strip() for line in (log or "").splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "failed")


def print_analyses(items: list[dict[str, Any]], title: str) -> None:
    """A resources table, then one unwrapped line per variant that did not compile."""
    table = Table(title=title)
    columns: tuple[str, ...] = ("arch", "format", "variant", "VGPR", "live", "AGPR", "SGPR", "LDS B")
    columns += ("scratch B", "spills v/s")
    for column in (*columns, "waves/SIMD", "limiter"):
        table.add_column(column, overflow="fold")
    for item in items:
        r = item["resources"] or {}
        if not item["ok"]:
            table.add_row(item["arch"], item["format"], item["variant"], *["-"] * 8, "compile failed")
            continue
        live = ((r.get("liveness") or {}).get("vgpr") or {}).get("high_water", "-")  # arch-VGPR high-water
        cells = [str(r.get("vgpr")), str(live)]
        cells += [str(r.get(key)) for key in ("agpr", "sgpr", "lds_bytes", "scratch_bytes")]
        spills = f"{r.get('vgpr_spills')}/{r.get('sgpr_spills')}"
        table.add_row(item["arch"], item["format"], item["variant"], *cells, spills,
                      str(r.get("waves_per_simd")), str(r.get("limiter")))  # fmt: skip
    out.print(table)
    for item in items:
        if not item["ok"]:
            line = f"{item['variant']} {item['format']} {item['arch']}: {first_error_line(item['error'])}"
            out.print(line, soft_wrap=True, markup=False, highlight=False)


def _analyze_local(
    folder: Path, arch: str, formats: list[str] | None, variants: list[str] | None
) -> dict[str, Any]:
    """Pre-screen a folder on this machine; nothing is stored."""
    from kernels.packages.archive import PackageArchiveError
    from kernels.packages.loader import load_folder
    from kernels.packages.manifest import ManifestError
    from service.kernel_analyses import variant_item
    from workers.prescreen import CompilerUnavailable, PrescreenError, analyse_package

    try:
        package = load_folder(folder)
        result = analyse_package(package, arch, formats, variants)
    except (PackageArchiveError, ManifestError) as error:
        raise fail(f"{folder}: {error}") from None
    except PrescreenError as error:
        raise fail(f"{error.field}: {error}") from None
    except CompilerUnavailable as error:
        raise fail(str(error), 1) from None
    items = [variant_item(item, result.arch, result.toolchain) for item in result.items]
    return {
        "kernel": package.name,
        "version": package.version,
        "arch": arch,
        "toolchain": result.toolchain,
        "analysed": sum(1 for item in result.items if item.ok),
        "failed": sum(1 for item in result.items if not item.ok),
        "spilling": sum(1 for item in result.items if item.spills),
        "items": items,
        "not_reached": [{"format": fmt, "variant": variant} for fmt, variant in result.not_reached],
    }


@kernel_app.command("analyze")
def analyze(
    ref: str = typer.Argument(
        ..., help="NAME[@VERSION] of a stored package, or a package folder (local, not stored)"
    ),
    arch: str = typer.Option(..., help="AMD arch, e.g. gfx906 or gfx950"),
    formats: list[str] | None = typer.Option(None, "--format", help="only this format (repeatable)"),
    variants: list[str] | None = typer.Option(None, "--variant", help="only this variant (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    url: str = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """ISA pre-screen without a GPU: compile each variant for ARCH, report VGPR/SGPR/LDS/spills/occupancy."""
    formats = formats or None
    variants = variants or None
    if "@" not in ref and Path(ref).is_dir():
        result = _analyze_local(Path(ref), arch, formats, variants)
    else:
        name, version = split_ref(ref)
        client = _client(url, token)
        if version is None:
            version = _call(client.kernel, name)["latest"]
        body = {"arch": arch, "formats": formats, "variants": variants}
        result = _call(client.analyze_kernel, name, version, body, ANALYZE_TIMEOUT_S)
    if as_json:
        out.print_json(data=result)
        return
    title = (
        f"{result['kernel']}@{result['version'][:12]} on {result['arch']}: {result['analysed']} analysed, "
        f"{result['failed']} failed, {result['spilling']} spilling"
    )
    print_analyses(result["items"], title)
    if result.get("not_reached"):
        console.print(
            f"{len(result['not_reached'])} variants not reached within the pre-screen's time budget"
        )
