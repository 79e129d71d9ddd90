"""A real browser (Debian's chromium, driven by Playwright) walks a private dashboard from a live server.

It signs in once with a read token (the form sets an HttpOnly, SameSite=Strict cookie), then only clicks:
sweeps -> sweep page -> point -> measurement -> dispatch CSV / API JSON, tables -> table -> .inc, diff, and
the concepts page. Set TUNEBASE_DOCS_SCREENSHOT=docs/dashboard.png to also refresh the committed screenshot.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.db.migrate import upgrade
from tests.conftest import REPO, LiveServer, start_server, stop_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VARIANTS = [
    "MX4/KB1/RW1/U4/RG1/PG0/PP0",
    "MX4/KB1/RW2/U2/RG1/PG0/PP0",
    "MX4/KB4/RW2/U2/RG1/PG0/PP0",
    "MX4/KB1/RW2/U4/RG1/PG0/PP0",
]
SPEC: dict[str, Any] = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0", "Q4_0"],
    "shapes": [
        {"name": "Browser_Wide", "n": 512, "k": 256},
        {"name": "Browser_Square", "n": 256, "k": 256},
        {"name": "Browser_A_Rather_Long_Shape_Name_That_Must_Not_Be_Clipped", "n": 128, "k": 512},
    ],
    "m": [1, 2, 4],
    "variants": VARIANTS,
    "min_dispatches": 8,
    "max_dispatches": 8,
    "labels": {"suite": "browser"},
}
# a second sweep adds a shape, so the second table version has entries the first lacks
EXTRA: dict[str, Any] = {
    **SPEC,
    "formats": ["Q8_0"],
    "shapes": [{"name": "Browser_Extra", "n": 384, "k": 256}],
    "m": [1],
}
NO_WORKER: dict[str, Any] = {
    "arch": "gfx906",
    "phase": "decode",
    "formats": ["Q8_0"],
    "shapes": [{"name": "Nobody_Serves", "n": 256, "k": 256}],
    "m": [1, 2],
    "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0"],
}


@pytest.fixture
def private_server(tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    url = f"sqlite:///{tmp_path / 'browser.sqlite3'}"
    upgrade(url)
    server = start_server(tmp_path, url, artifact_dir, {"TUNEBASE_DASHBOARD_PUBLIC": "false"})
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail("Debian chromium is missing: run scripts/ensure-system.sh")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def _wait(client: httpx.Client, sweep_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/sweeps/{sweep_id}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"sweep {sweep_id} did not finish: {status}")


def _populate(server: LiveServer) -> dict[str, Any]:
    """Two host sweeps and two table versions; one gfx906 sweep left waiting, one cancelled."""
    submit = server.cli("token", "create", "--name", "browser", "--scopes", "submit").stdout.strip()
    read = server.cli("token", "create", "--name", "reader", "--scopes", "read").stdout.strip()
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {submit}"}, timeout=30)
    host = _wait(client, client.post("/v1/sweeps", json=SPEC).json()["id"])
    assert host["status"] == "done", host
    assert client.post("/v1/tables", json={"arch": "host", "phase": "decode"}).status_code == 201
    assert _wait(client, client.post("/v1/sweeps", json=EXTRA).json()["id"])["status"] == "done"
    assert client.post("/v1/tables", json={"arch": "host", "phase": "decode"}).status_code == 201
    waiting = client.post("/v1/sweeps", json=NO_WORKER)
    assert waiting.status_code == 202
    assert "no live worker serves gfx906 (0 online)" in waiting.json()["warnings"][0]
    cancelled = client.post("/v1/sweeps", json={**NO_WORKER, "labels": {"to": "cancel"}}).json()
    assert client.post(f"/v1/sweeps/{cancelled['id']}/cancel").json()["status"] == "cancelled"
    return {"read": read, "host": host["id"], "waiting": waiting.json()["id"], "cancelled": cancelled["id"]}


def _fill(page: Any, selector: str) -> str:
    return str(page.locator(selector).first.get_attribute("fill"))


def test_dashboard_walk_in_chromium(private_server: LiveServer, browser: Any, tmp_path: Path) -> None:
    ids = _populate(private_server)
    base = private_server.url
    context = browser.new_context(viewport={"width": 1280, "height": 1100})
    page = context.new_page()

    # signed out, a private page sends the browser to the sign-in form, which returns it afterwards
    page.goto(f"{base}/", wait_until="load")
    assert "/login" in page.url
    page.fill("input[name=token]", "tb_wrong")
    page.click("button[type=submit]")
    assert page.locator("p.error").inner_text().startswith("unknown")
    page.fill("input[name=token]", ids["read"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    cookie = next(c for c in context.cookies() if c["name"] == "tunebase_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    # the cookie reads the API from the browser, but never writes: mutating routes stay bearer-only
    assert page.request.get(f"{base}/v1/sweeps/{ids['host']}").status == 200
    assert page.request.post(f"{base}/v1/sweeps", data=SPEC).status == 401

    # honest progress: the cancelled sweep did nothing and shows no green
    cancelled = page.locator(f'tr.sweep[data-id="{ids["cancelled"]}"]')
    assert cancelled.locator(".bar .seg.done").count() == 0
    assert "0 of 2 done, 2 cancelled" in cancelled.inner_text()
    assert "2 of 2 done" not in cancelled.inner_text()
    assert "no worker" in page.locator(f'tr.sweep[data-id="{ids["waiting"]}"]').inner_text()

    # the heatmap: every cell names its variant and median, hover text has margins, labels are not clipped
    heatmaps = page.locator("figure.heatmap")
    assert heatmaps.count() == 2  # host/decode/Q4_0 and host/decode/Q8_0
    cells = page.locator("figure.heatmap rect.cell")
    assert cells.count() == 2 * 3 * 3 + 1  # + the extra shape for Q8_0 (its other M are "not measured")
    assert page.locator("figure.heatmap rect.void").count() == 2
    title = cells.first.locator("title").text_content() or ""
    assert "median" in title and "runner-up" in title and ("margin" in title or "tie" in title)
    assert re.search(r"\d µs", page.locator("figure.heatmap text.cell-text").nth(1).text_content() or "")
    legend = page.locator("p.legend").first.inner_text()
    assert "not measured" in legend and "statistical tie" in legend
    lefts = page.evaluate("() => [...document.querySelectorAll('text.row-label')].map(t => t.getBBox().x)")
    assert lefts and min(lefts) >= 0, lefts  # the longest shape name fits inside its SVG
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("TUNEBASE_DOCS_SCREENSHOT"):
        page.screenshot(path=str(REPO / os.environ["TUNEBASE_DOCS_SCREENSHOT"]), full_page=True)
    heatmap_colors = {
        cells.nth(i).get_attribute("data-variant"): cells.nth(i).get_attribute("fill")
        for i in range(cells.count())
    }

    legend_colors = page.evaluate(
        "() => Object.fromEntries([...document.querySelectorAll('p.legend span.variant')]"
        ".map(s => [s.dataset.variant, s.dataset.color]))"
    )
    assert legend_colors == heatmap_colors  # every variant shown is in the legend, in its one colour

    # a waiting sweep's page says why it waits
    page.click(f'tr.sweep[data-id="{ids["waiting"]}"] td a')
    assert "no live worker serves gfx906 (0 online)" in page.locator("p.warning").inner_text()
    page.go_back()

    # sweep page -> a task -> the point's distributions, in the same colours as the heatmap
    page.click(f'tr.sweep[data-id="{ids["host"]}"] td a')
    page.wait_for_url(f"**/dashboard/sweeps/{ids['host']}")
    tasks = page.locator("tr.task")
    assert tasks.count() == 18 and page.locator('tr.task[data-state="done"]').count() == 18
    tasks.first.locator("a").click()
    page.wait_for_url("**/dashboard/point?**")
    series = page.locator("svg.distribution g.series")
    assert {series.nth(i).get_attribute("data-variant") for i in range(series.count())} == set(VARIANTS)
    for i in range(series.count()):
        variant = series.nth(i).get_attribute("data-variant")
        box_fill = series.nth(i).locator("rect.box").get_attribute("fill")
        if variant in heatmap_colors:
            assert box_fill == heatmap_colors[variant], (variant, box_fill, heatmap_colors)
    assert "failed parity" in page.locator("p.legend").inner_text()

    # measurement -> dispatch CSV (a dashboard route) and its API JSON (the cookie reads it)
    series.first.locator("a").click()
    page.wait_for_url("**/dashboard/measurements/**")
    assert page.locator("#resources h2").inner_text() == "ISA / resources"
    csv_href = page.locator("a.csv").get_attribute("href")
    csv = page.request.get(f"{base}{csv_href}")
    assert csv.status == 200 and csv.text().splitlines()[0].startswith("seq")
    assert len(csv.text().splitlines()) == 1 + 8
    with page.expect_navigation():
        page.click("text=JSON")
    assert '"variant"' in page.content()
    page.go_back()

    # tables -> diff (counted as the CLI counts) -> table -> .inc
    page.click("header >> text=tables")
    assert page.locator("section.table-version").count() == 2
    assert not re.search(r"\d\.\d{5,}", page.locator("main").inner_text())  # rounded, never raw floats
    counts_text = page.locator("p.diff-counts").first.inner_text()
    cli = private_server.cli("table", "diff", "1", "2", "--token", ids["read"])
    assert cli.returncode == 0, cli.stderr
    cli_counts = re.search(r"table 1 -> 2: (.*)", cli.stdout)
    assert cli_counts is not None and cli_counts.group(1).strip() in counts_text
    page.locator("a.diff-link").first.click()
    page.wait_for_url("**/dashboard/tables/2/diff?base=1")
    added = page.locator("table.diff tr.added")
    assert added.count() >= 1 and "Q8_0" in added.first.inner_text() and "384x256" in added.first.inner_text()
    page.locator("#diff h2 a").nth(1).click()
    page.wait_for_url("**/dashboard/tables/2")
    assert "#pragma once" in page.locator("pre.inc").inner_text()
    inc = page.request.get(f"{base}{page.locator('a.inc').get_attribute('href')}")
    assert inc.status == 200 and "selectTbDecode(" in inc.text()  # tb-decode: its struct table

    page.click("header >> text=concepts")
    assert page.locator("h2#regret").count() == 1
    page.click("text=sign out")
    page.goto(f"{base}/dashboard/tables")
    assert "/login" in page.url
