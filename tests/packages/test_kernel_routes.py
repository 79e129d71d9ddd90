"""`POST/GET /v1/kernels` on SQLite and Postgres: upload over HTTP, content-addressed versions, list, show.

Every bad package is a 4xx naming the manifest key or archive member, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Iterator

from kernels.packages.archive import MAX_ARCHIVE_BYTES, write_archive
from kernels.packages.loader import builtin_packages
from kernels.packages.package import content_version
from tests.packages.conftest import (
    Api,
    file_member,
    package_archive,
    package_files,
    package_tar,
    stored_counts,
    tar_of,
)

GZIP = {"Content-Type": "application/gzip"}


def test_push_is_content_addressed_and_listed(api: Api) -> None:
    archive = package_archive()
    first = api.http.post("/v1/kernels", content=archive, headers=GZIP)
    assert first.status_code == 201, first.text
    body = first.json()
    version = content_version(package_files())
    assert body["name"] == "q8-rows" and body["created"] is True
    assert body["version"] == version and body["sha256"] == hashlib.sha256(archive).hexdigest()
    assert body["ref"] == f"q8-rows@{version[:12]}"
    # rocm/cuda: 4 ROWS x 2 caps minus R8/V24; host also loses every capped point
    assert body["backends"] == {"host": 4, "rocm": 7, "cuda": 7} and body["variants"] == 7
    assert body["invalid"] == [{"point": "R8/V24", "rule": "ROWS <= 4 or VGPR_CAP == 0"}]

    again = api.http.post("/v1/kernels", content=archive, headers=GZIP)
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["version"] == version
    # the same files in a differently built archive (under a top folder) are the same version
    nested = {f"q8-rows/{name}": data for name, data in package_files().items()}
    moved = api.http.post("/v1/kernels", content=write_archive(nested), headers=GZIP)
    assert moved.status_code == 200 and moved.json()["version"] == version
    assert moved.json()["sha256"] != body["sha256"]
    assert stored_counts(api.url) == (1, 0)

    listing = api.http.get("/v1/kernels").json()
    by_name = {item["name"]: item for item in listing["items"]}
    assert {"tb-decode", "tb-prefill", "q8-rows"} <= set(by_name) and listing["total"] == len(by_name)
    assert (
        by_name["tb-decode"]["builtin"]
        and by_name["tb-decode"]["latest"] == builtin_packages()["tb-decode"].version
    )
    assert not by_name["q8-rows"]["builtin"]
    assert [v["version"] for v in by_name["q8-rows"]["versions"]] == [version]
    assert by_name["q8-rows"]["versions"][0]["uploaded_by"] == "kernel-ci"

    versions = api.http.get("/v1/kernels/q8-rows", headers={"Authorization": f"Bearer {api.read_token}"})
    assert versions.status_code == 200 and versions.json()["latest"] == version

    detail = api.http.get(f"/v1/kernels/q8-rows/{version[:10]}").json()
    assert detail["version"] == version and detail["phase"] == "decode" and detail["builtin"] is False
    assert detail["manifest"]["params"] == {"ROWS": [1, 2, 4, 8], "VGPR_CAP": [0, 24]}
    files = {f["path"]: f for f in detail["files"]}
    assert set(files) == set(package_files())
    for name, data in package_files().items():
        assert files[name] == {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    params = {p["name"]: p for p in detail["describe"]["params"]}
    assert params["VGPR_CAP"]["meaning"].startswith("VGPRs per lane")
    assert detail["variants"] == {"host": 4, "rocm": 7, "cuda": 7} and detail["analyses"] == []

    builtin = api.http.get(f"/v1/kernels/tb-decode/{builtin_packages()['tb-decode'].version[:8]}").json()
    assert builtin["builtin"] is True and "decode.hip" in {f["path"] for f in builtin["files"]}


def test_a_new_version_is_listed_first(api: Api) -> None:
    assert api.http.post("/v1/kernels", content=package_archive(), headers=GZIP).status_code == 201
    changed = package_files()
    changed["rows.c"] += b"\n/* second revision */\n"
    second = api.http.post("/v1/kernels", content=write_archive(changed), headers=GZIP)
    assert second.status_code == 201, second.text
    versions = api.http.get("/v1/kernels/q8-rows").json()["versions"]
    assert [v["version"] for v in versions] == [content_version(changed), content_version(package_files())]
    assert stored_counts(api.url) == (2, 0)


def test_unknown_packages_and_scopes(api: Api) -> None:
    assert api.http.get("/v1/kernels/no-such-kernel").status_code == 404
    assert api.http.get("/v1/kernels/tb-decode/ffffffff").status_code == 404
    assert api.http.get("/v1/kernels/Bad_Name").status_code == 422
    reader = {"Authorization": f"Bearer {api.read_token}", **GZIP}
    refused = api.http.post("/v1/kernels", content=package_archive(), headers=reader)
    assert refused.status_code == 403
    anonymous = api.http.post("/v1/kernels", content=package_archive(), headers={**GZIP, "Authorization": ""})
    assert anonymous.status_code == 401
    assert stored_counts(api.url) == (0, 0)


def _manifest(old: str, new: str) -> dict[str, bytes]:
    text = package_files()["tunebase-kernel.toml"].decode()
    assert old in text
    return {"tunebase-kernel.toml": text.replace(old, new, 1).encode()}


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


def _hardlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE
    info.linkname = target
    return info


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    return info


def _without_manifest() -> bytes:
    files = {name: data for name, data in package_files().items() if name != "tunebase-kernel.toml"}
    return tar_of([file_member(name) for name in sorted(files)], files)


def _with_member(name: str, data: bytes = b"int x;") -> bytes:
    return package_tar(extra=[file_member(name)], replace={name: data})


def _manifest_edit(old: str, new: str) -> Callable[[], bytes]:
    return lambda: package_tar(replace=_manifest(old, new))


def _huge_space_with_a_when() -> bytes:
    """Three more parameters of 64 values (262144 x 8 points) and a `when` over them that fails at B = 63:
    refused for the space's size alone; `when` is not enumerated over a product past the points limit (16
    parameters of 64 values would never end)."""
    text = package_files()["tunebase-kernel.toml"].decode()
    values = "[" + ", ".join(str(i) for i in range(64)) + "]"
    for old, new in (
        ("VGPR_CAP = [0, 24]\n", f"VGPR_CAP = [0, 24]\nA = {values}\nB = {values}\nC = {values}\n"),
        ('name = "R{ROWS}/V{VGPR_CAP}"', 'name = "R{ROWS}/V{VGPR_CAP}/A{A}/B{B}/C{C}"'),
        ('shared_bytes = "0"\n',
         'shared_bytes = "0"\n\n[prelaunch]\nsymbol = "prep"\ngrid = ["1", "1", "1"]\n'
         'when = "A // (B - 63) + C >= 0"\n'),
    ):  # fmt: skip
        assert old in text
        text = text.replace(old, new, 1)
    return package_tar(replace={"tunebase-kernel.toml": text.encode()})


# case: (archive, status, field (the manifest key or the archive member), words in the message)
BAD_PACKAGES: dict[str, tuple[Callable[[], bytes], int, str, str]] = {
    "missing manifest": (_without_manifest, 422, "body", "no tunebase-kernel.toml"),
    "unknown manifest key": (
        _manifest_edit('phase = "decode"', 'phase = "decode"\ncolour = "blue"'),
        422,
        "colour",
        "unknown key",
    ),
    "restriction names an unknown parameter": (
        _manifest_edit('"ROWS <= 4 or VGPR_CAP == 0"', '"ROWZ <= 4"'),
        422,
        "restrictions.rules.0",
        "unknown name(s) ROWZ",
    ),
    "prelaunch when names a problem value": (
        _manifest_edit(
            'shared_bytes = "0"\n',
            'shared_bytes = "0"\n\n[prelaunch]\nsymbol = "prep"\ngrid = ["1", "1", "1"]\nwhen = "m >= 2"\n',
        ),
        422,
        "prelaunch.when",
        "unknown name(s) m",
    ),
    "prelaunch when that fails on a variant": (
        _manifest_edit(
            'shared_bytes = "0"\n',
            'shared_bytes = "0"\n\n[prelaunch]\nsymbol = "prep"\ngrid = ["1", "1", "1"]\n'
            'when = "ROWS // (VGPR_CAP - 24) > 1"\n',
        ),
        422,
        "prelaunch.when",
        "fails at ROWS=1, VGPR_CAP=24",
    ),
    "prelaunch when over a space too large to load": (
        _huge_space_with_a_when,
        422,
        "params",
        "the space has",
    ),
    "source file missing": (
        _manifest_edit('hip = ["rows.hip"]', 'hip = ["gone.hip"]'),
        422,
        "sources.hip.0",
        "'gone.hip' is not in the package",
    ),
    "built-in name": (_manifest_edit('name = "q8-rows"', 'name = "tb-decode"'), 422, "name", "built-in"),
    "member ../x.c": (lambda: _with_member("../x.c"), 422, "../x.c", "'..' is not allowed"),
    "nested ..": (lambda: _with_member("src/../../x.c"), 422, "src/../../x.c", "'..' is not allowed"),
    "absolute path": (lambda: _with_member("/etc/x.c"), 422, "/etc/x.c", "absolute paths are not allowed"),
    "symlink": (
        lambda: package_tar(extra=[_symlink("evil.h", "/etc/passwd")]),
        422,
        "evil.h",
        "links are not allowed",
    ),
    "hard link": (
        lambda: package_tar(extra=[_hardlink("again.c", "rows.c")]),
        422,
        "again.c",
        "links are not allowed",
    ),
    "device": (lambda: package_tar(extra=[_device("null")]), 422, "null", "only regular files"),
    "not an archive": (lambda: b"this is not a tarball", 422, "body", "not a readable .tar.gz"),
}


def test_bad_packages_are_refused_and_nothing_is_stored(api: Api) -> None:
    """One database for every case (migrations dominate the cost); each case is checked on its own."""
    for case, (make, status, field, words) in BAD_PACKAGES.items():
        response = api.http.post("/v1/kernels", content=make(), headers=GZIP)
        assert response.status_code == status, (case, response.text)
        error = response.json()["error"]
        assert [f["field"] for f in error["fields"]] == [field], (case, error)
        assert words in error["fields"][0]["message"], (case, error)
        assert stored_counts(api.url) == (0, 0), case
    names = [i["name"] for i in api.http.get("/v1/kernels").json()["items"]]
    assert names == ["tb-decode", "tb-mxfp4-gemm", "tb-prefill"]


def _fifty_megabytes() -> Iterator[bytes]:
    chunk = b"\0" * (1 << 20)
    for _ in range(50):
        yield chunk


def test_a_50_mb_upload_is_413_before_it_is_read(api: Api) -> None:
    big = b"\0" * (50 << 20)
    declared = api.http.post("/v1/kernels", content=big, headers=GZIP)
    assert declared.status_code == 413, declared.text
    message = declared.json()["error"]["message"]
    # refused by the route's archive limit, or earlier by the app-wide body limit (TUNEBASE_MAX_BODY_BYTES)
    assert str(MAX_ARCHIVE_BYTES) in message or "TUNEBASE_MAX_BODY_BYTES" in message, message
    # no Content-Length (chunked): refused while streaming, once the limit is passed
    streamed = api.http.post("/v1/kernels", content=_fifty_megabytes(), headers=GZIP)
    assert streamed.status_code == 413, streamed.text
    assert any(word in streamed.json()["error"]["message"] for word in ("more than", "larger than"))
    assert stored_counts(api.url) == (0, 0)


def test_a_small_archive_that_expands_past_the_limits_is_413(api: Api) -> None:
    bomb = package_tar(extra=[file_member("big.bin")], replace={"big.bin": b"\0" * (5 << 20)})
    assert len(bomb) < MAX_ARCHIVE_BYTES
    response = api.http.post("/v1/kernels", content=bomb, headers=GZIP)
    assert response.status_code == 413 and "big.bin" in response.json()["error"]["message"]
    assert stored_counts(api.url) == (0, 0)


def test_wrong_content_type_is_422(api: Api) -> None:
    response = api.http.post("/v1/kernels", json={"name": "q8-rows"})
    assert response.status_code == 422 and "application/gzip" in response.json()["error"]["message"]
    assert stored_counts(api.url) == (0, 0)


def test_openapi_documents_the_upload(api: Api) -> None:
    spec = api.http.get("/openapi.json").json()
    post = spec["paths"]["/v1/kernels"]["post"]
    assert "application/gzip" in post["requestBody"]["content"]
    assert {"200", "201", "413", "422"} <= set(post["responses"])
    assert "/v1/kernels/{name}/{version}/analyze" in spec["paths"]
