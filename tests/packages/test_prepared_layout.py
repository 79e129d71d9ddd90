"""weights = "prepare": the package's own kernel converts GGUF blocks into its layout, once per buffer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernels.packages.loader import load_folder
from workers.backends.base import TaskSpec
from workers.backends.host import HostBackend

PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "packages" / "prepared-q8"
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def spec(root: Path, **kw: object) -> TaskSpec:
    args: dict[str, object] = dict(
        arch="host", phase="decode", format="Q8_0", shape="T", n=48, k=256, m=2, variants=("U1", "U4"),
        min_dispatches=3, warmup=1, kernel="prepared-q8", kernel_root=str(root),
    )  # fmt: skip
    args.update(kw)
    return TaskSpec(**args)  # type: ignore[arg-type]


def test_prepared_layout_runs_and_passes_parity(tmp_path: Path) -> None:
    package = load_folder(PACKAGE)
    assert package.manifest.weights == "prepare" and package.manifest.prepare is not None
    result = HostBackend(tmp_path).run_task(spec(PACKAGE))
    for r in result.results:
        assert r.error is None, r.error
        assert r.parity is not None and r.parity.passed and r.parity.rel_l2 < 1e-5, r.parity
        assert len(r.dispatches) == 3
    assert result.weight_copies > 1  # each copy was prepared by the package's kernel


def test_a_wrong_prepare_kernel_fails_parity_not_the_task(tmp_path: Path) -> None:
    folder = tmp_path / "prepared-q8"
    shutil.copytree(PACKAGE, folder)
    source = folder / "gemv.c"
    source.write_text(source.read_text().replace("= half_to_float(h);", "= 0.5f * half_to_float(h);"))
    result = HostBackend(tmp_path / "art").run_task(spec(folder))
    assert all(r.parity is not None and not r.parity.passed for r in result.results)


PRELAUNCH = Path(__file__).resolve().parents[1] / "fixtures" / "packages" / "prelaunch-q8"


def test_prelaunch_kernel_runs_before_every_launch_and_is_timed_with_it(tmp_path: Path) -> None:
    package = load_folder(PRELAUNCH)
    assert (
        package.prelaunch_for("host") is not None
        and package.prelaunch_symbol(package.space("host")[0]) == "prep"
    )
    result = HostBackend(tmp_path).run_task(
        spec(PRELAUNCH, kernel="prelaunch-q8", n=16, k=64, m=2, min_dispatches=2)
    )
    for r in result.results:
        assert r.error is None, r.error
        assert r.parity is not None and r.parity.passed, r.parity  # the variant reads only what prep wrote
        assert len(r.dispatches) == 2
        assert all(d.device_ns >= 2_000_000 for d in r.dispatches)  # prep's 2 ms sleep is in the time


def test_without_the_prelaunch_the_variant_fails_parity(tmp_path: Path) -> None:
    folder = tmp_path / "prelaunch-q8"
    shutil.copytree(PRELAUNCH, folder)
    manifest = folder / "tunebase-kernel.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('[prelaunch]\nsymbol = "prep"\ngrid = ["1", "1", "1"]\n', ""))
    result = HostBackend(tmp_path / "art").run_task(spec(folder, kernel="prelaunch-q8", n=16, k=64, m=2))
    assert all(r.parity is not None and not r.parity.passed for r in result.results)


def test_prelaunch_manifest_errors_name_their_key() -> None:
    from kernels.packages.manifest import ManifestError, load_manifest

    text = (PRELAUNCH / "tunebase-kernel.toml").read_text()
    bad = text.replace('symbol = "prep"', 'symbol = "prep_{ROWS}"').replace(
        'grid = ["1", "1", "1"]', 'grid = ["n_rows", "1", "1"]'
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(bad)
    keys = {key for key, _ in info.value.problems}
    assert {"prelaunch.symbol", "prelaunch.grid.0"} <= keys
