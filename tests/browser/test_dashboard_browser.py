"""A real browser (Debian's chromium, driven by Playwright) loads the dashboard from a live server.

Set TUNEBASE_DOCS_SCREENSHOT=docs/dashboard.png to also refresh the screenshot committed under docs/.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, LiveServer

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
SPEC: dict[str, Any] = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0", "Q4_0"],
    "shapes": [
        {"name": "Browser_Wide", "n": 512, "k": 256},
        {"name": "Browser_Square", "n": 256, "k": 256},
        {"name": "Browser_Tall", "n": 128, "k": 512},
    ],
    "m": [1, 2, 4],
    "variants": ["KB1/TW4", "KB2/TW8", "KB4/TW4", "KB8/TW8"],
    "min_dispatches": 8,
    "max_dispatches": 8,
    "labels": {"suite": "browser"},
}


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


def _sweep(server: LiveServer) -> dict[str, Any]:
    token = server.cli("token", "create", "--name", "browser", "--scopes", "submit").stdout.strip()
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    sweep = client.post("/v1/sweeps", json=SPEC).json()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/sweeps/{sweep['id']}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            break
        time.sleep(0.3)
    assert status["status"] == "done", status
    table = client.post("/v1/tables", json={"arch": "host", "phase": "decode"})
    assert table.status_code == 201, table.text
    return status


def test_dashboard_in_chromium(live_server: LiveServer, browser: Any, tmp_path: Path) -> None:
    status = _sweep(live_server)
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    response = page.goto(f"{live_server.url}/", wait_until="load")
    assert response is not None and response.status == 200

    assert page.locator("tr.sweep").count() == 1
    assert "100%" in page.locator(f'tr.sweep[data-id="{status["id"]}"]').inner_text()
    heatmaps = page.locator("figure.heatmap")
    assert heatmaps.count() == 2  # host/decode/Q4_0 and host/decode/Q8_0
    for index in range(2):
        cells = heatmaps.nth(index).locator("rect.cell")
        assert cells.count() == 3 * 3  # shapes x M: every point has a winner
        assert {cells.nth(i).get_attribute("data-variant") for i in range(9)} <= set(SPEC["variants"])
        box = cells.first.bounding_box()
        assert box is not None and box["width"] > 20 and box["height"] > 10  # laid out, visible
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("TUNEBASE_DOCS_SCREENSHOT"):
        page.screenshot(path=str(REPO / os.environ["TUNEBASE_DOCS_SCREENSHOT"]), full_page=True)

    heatmaps.first.locator("rect.cell").first.click()  # a cell links to its point's distributions
    page.wait_for_url("**/dashboard/point?**")
    series = page.locator("svg.distribution g.series")
    assert series.count() == len(SPEC["variants"])
    assert page.locator("svg.distribution rect.box").count() == len(SPEC["variants"])
    assert {series.nth(i).get_attribute("data-variant") for i in range(series.count())} == set(
        SPEC["variants"]
    )
    assert all(int(series.nth(i).get_attribute("data-n") or 0) >= 8 for i in range(series.count()))
    page.screenshot(path=str(tmp_path / "distribution.png"), full_page=True)

    page.locator("svg.distribution g.series a").first.click()
    page.wait_for_url("**/dashboard/measurements/**")
    assert page.locator("#resources h2").inner_text() == "ISA / resources"
    page.goto(f"{live_server.url}/dashboard/tables")
    assert page.locator("section.table-version").count() == 1
