"""Dashboard HTML from the server's own session: heatmap cells, box-plot series, resources, access setting."""

from __future__ import annotations

import itertools
import re

from service.config import Settings
from service.dashboard.data import resource_sections
from service.dashboard.svg import box_stats, nice_ticks
from tests.api.conftest import Populated


def test_dashboard_pages_render_real_data(populated: Populated) -> None:
    client = populated.client()  # dashboard_public defaults to True: no token
    index = client.get("/")
    assert index.status_code == 200 and "text/html" in index.headers["content-type"]
    cells = re.findall(r'<rect class="cell" data-variant="([^"]+)" data-m="(\d)"', index.text)
    assert len(cells) == 8  # 2 formats x 2 shapes x 2 M, one winner each
    assert {v for v, _ in cells} <= {
        "MX4/KB1/RW1/U4/RG1/PG0/PP0",
        "MX4/KB1/RW2/U2/RG1/PG0/PP0",
        "MX4/KB1/RW2/U4/RG1/PG0/PP0",
    }
    assert 'class="sweep" data-id="' in index.text and "Api_Wide 256x256" in index.text
    only_q8 = client.get("/", params={"format": "Q8_0"}).text
    assert only_q8.count('<rect class="cell"') == 4

    link = re.search(r'href="(/dashboard/point\?[^"]+)"', index.text)
    assert link is not None
    point = client.get(link.group(1).replace("&amp;", "&"))
    assert point.status_code == 200
    series = re.findall(
        r'<g class="series" data-variant="([^"]+)" data-parity="pass" data-n="(\d+)"', point.text
    )
    assert sorted(v for v, _ in series) == [
        "MX4/KB1/RW1/U4/RG1/PG0/PP0",
        "MX4/KB1/RW2/U2/RG1/PG0/PP0",
        "MX4/KB1/RW2/U4/RG1/PG0/PP0",
    ]
    assert all(int(n) >= 6 for _, n in series) and point.text.count('class="box"') == 3

    measurement = re.search(r'href="/dashboard/measurements/(\d+)"', point.text)
    assert measurement is not None
    detail = client.get(f"/dashboard/measurements/{measurement.group(1)}")
    assert detail.status_code == 200 and "ISA / resources" in detail.text
    assert client.get("/dashboard/tables").status_code == 200
    assert client.get("/dashboard/measurements/999999").status_code == 404


def test_dashboard_can_require_a_token(populated: Populated) -> None:
    private = Populated(
        populated.settings.model_copy(update={"dashboard_public": False}),
        populated.sweep_id,
        populated.submit_token,
        populated.read_token,
    )
    signed_out = private.client().get("/dashboard/tables", follow_redirects=False)
    assert signed_out.status_code == 303
    assert signed_out.headers["location"] == "/login?next=%2Fdashboard%2Ftables"
    assert private.client(populated.read_token).get("/").status_code == 200
    assert isinstance(private.settings, Settings)


def test_plot_helpers() -> None:
    stats = box_stats([1, 2, 3, 4, 5, 6, 7, 8, 100])
    assert stats is not None and stats.median == 5 and stats.outliers == (100,) and stats.whisker_hi == 8
    assert box_stats([]) is None
    ticks = nice_ticks(0.0, 23.0)
    assert ticks[0] == 0 and ticks[-1] >= 20 and all(b > a for a, b in itertools.pairwise(ticks))
    sections = resource_sections(
        {
            "kernels": [
                {"name": "other", "vgpr": 40},
                {"name": "decode_kb8_tw8", "vgpr": 64, "diagnosis": ["spills"]},
            ]
        },
        "KB8/TW8",
    )
    assert (
        sections[0][0] == "decode_kb8_tw8"
        and ("vgpr", "64") in sections[0][1]
        and sections[0][2] == ["spills"]
    )


def test_resource_sections_turn_isa_analyses_into_sentences() -> None:
    region = {"start": "0x2508", "end": "0x2510", "instructions": 2}
    peak = {"high_water": 181, "at": "0x2508", "region": region, "loop": "0x2210-0x2698"}
    peak["breakdown"] = {"accumulators": 64, "scales": 14}
    liveness = {"vgpr": peak, "agpr": {"high_water": 0}, "arch_vgpr_limit": 188, "within_note": True}
    (section,) = resource_sections({"mxfp4_gemm": {"vgpr": 188, "liveness": liveness}}, "x")
    _name, pairs, _diagnosis, isa = section
    assert ("vgpr", "188") in pairs and not any(key.startswith("liveness") for key, _ in pairs)
    assert isa == [
        "arch VGPR high-water 181/188 over 0x2508-0x2510 (2 instructions) in loop 0x2210-0x2698: "
        "64 accumulators, 14 scales"
    ]
