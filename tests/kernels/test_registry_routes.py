"""GET /v1/formats and /v1/families serve the registry (read scope; anonymous only when configured)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.migrate import upgrade
from service.db.session import session_scope


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = tmp_path_factory.mktemp("registry")
    s = Settings(home=home, database_url=f"sqlite:///{home / 'r.sqlite3'}")
    upgrade(s.resolved_database_url)
    return s


def client(settings: Settings, token: str | None = None) -> TestClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(settings, start_embedded_worker=False), headers=headers)


@pytest.fixture(scope="module")
def read_token(settings: Settings) -> str:
    with session_scope(settings.resolved_database_url) as session:
        return create_token(session, "registry-read", ["read"])


def test_formats(settings: Settings, read_token: str) -> None:
    body = client(settings, read_token).get("/v1/formats", params={"limit": 100}).json()
    assert body["total"] == 21 == len(body["items"])
    by_name = {item["name"]: item for item in body["items"]}
    q4k = by_name["Q4_K"]
    assert (q4k["codebook"], q4k["codebook_name"], q4k["block_weights"], q4k["block_bytes"]) == (
        5,
        "Q4_1/Q4_K",
        256,
        144,
    )
    assert q4k["first_wave"] and q4k["kernel_kind"] == "asym" and q4k["packing_exact"] is False
    assert by_name["Q6_K"]["scale_group"] == 16 and by_name["Q8_0"]["packing_exact"] is True
    assert by_name["IQ2_XXS"]["kernel_kind"] is None and not by_name["IQ2_XXS"]["first_wave"]
    assert by_name["Q4_0"]["bits_per_weight"] == 4.5
    mx = by_name["MXFP4"]
    assert (mx["codebook"], mx["block_weights"], mx["block_bytes"]) == (32, 32, 17)
    assert mx["bits_per_weight"] == 4.25 and mx["kernel_kind"] is None  # no tb-packed packing
    assert by_name["NVFP4"]["codebook"] == 33 and by_name["NVFP4"]["bits_per_weight"] == 4.5
    page = client(settings, read_token).get("/v1/formats", params={"limit": 2, "offset": 1}).json()
    assert [i["name"] for i in page["items"]] == [i["name"] for i in body["items"][1:3]]


def test_families(settings: Settings, read_token: str) -> None:
    """The built-in packages with their parameters (and meaning) and every backend's space."""
    body = client(settings, read_token).get("/v1/families").json()
    fams = {f["name"]: f for f in body["items"]}
    assert set(fams) == {"tb-decode", "tb-prefill", "tb-mxfp4-gemm"} and body["total"] == 3
    decode = fams["tb-decode"]
    assert decode["phase"] == "decode" and decode["builtin"] and decode["weights"] == "tb-split"
    params = {p["name"]: p for p in decode["params"]}
    assert params["kb"]["values"] == [1, 4, 5] and params["mx"]["values"] == [1, 2, 4, 8]
    assert "split-K" in params["kb"]["meaning"] and "persistent grid" in params["pg"]["meaning"]
    spaces = decode["backends"]
    # cuda: 136 + k3m's 4 PP6 flat kernels + k3i's 7 PP 7 / 8 interleaved ring kernels + k3j's 4 RG16
    # split-K kernels + k3q's 6 PP9 (the stream kernel with split waits)
    assert spaces["rocm"]["count"] == 68 and spaces["host"]["count"] == 6 and spaces["cuda"]["count"] == 217
    assert spaces["host"]["variants"][0] == {
        "name": "MX4/KB1/RW1/U4/RG1/PG0/PP0",
        "params": {"mx": 4, "kb": 1, "rw": 1, "u": 4, "rg": 1, "pg": 0, "pp": 0},
        "order": 0,
    }
    prefill = fams["tb-prefill"]["backends"]
    # 156 mma.sync + 54 wgmma + 28 warp-specialised wgmma (6 of them stream-K) + 4 in 2-CTA clusters
    assert prefill["cuda"]["count"] == 242 and prefill["host"]["count"] == 4
    assert any("stages == 2" in p["rule"] for p in prefill["rocm"]["invalid"])
    assert fams["tb-prefill"]["phase"] == "prefill" and fams["tb-prefill"]["weights"] == "tb-split"
    assert fams["tb-prefill"]["prelaunch"] == {
        "symbol": "tb_prefill_prep_sk{split_k}",
        "backends": ["cuda", "rocm"],
        "when": "1",
        "overlap": False,
    }
    assert fams["tb-decode"]["prelaunch"] == {
        "symbol": "tb_decode_prep_rg{rg}", "backends": ["cuda"], "when": "pp >= 13", "overlap": True,
    }  # fmt: skip
    mx = fams["tb-mxfp4-gemm"]
    assert mx["formats"] == ["MXFP4"] and mx["weights"] == "prepare" and mx["phase"] == "prefill"
    assert {b: s["count"] for b, s in mx["backends"].items()} == {"host": 2, "cuda": 23, "rocm": 124}


def test_read_scope_required(settings: Settings) -> None:
    assert client(settings).get("/v1/formats").status_code == 401
    assert client(settings).get("/v1/families").status_code == 401
    assert client(settings, "tb_not_a_token").get("/v1/families").status_code == 401
    open_settings = settings.model_copy(update={"anonymous_read": True})
    assert client(open_settings).get("/v1/families").status_code == 200
