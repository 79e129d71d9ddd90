"""The harness against the real hip-python package: names, constants, enums and the no-device paths.

The launch path itself runs through hip-python over a fake device in test_rocm_backend.py; here are the
checks that need no device at all, including the machine's real HIP runtime (Debian's libamdhip64,
installed with hipcc) answering that there is no GPU.
"""

from __future__ import annotations

import ctypes.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rocm.conftest import REPO, build_fake_device, device_env
from workers.harness import hip_runner

RUNNER = Path(hip_runner.__file__).read_text()


def test_every_hip_call_of_the_harness_exists_in_hip_python(hip_python: str) -> None:
    from hip import hip

    called = set(re.findall(r"(?:\bhip|_hip\(\))\.(hip[A-Za-z0-9_]+)", RUNNER))
    assert {"hipModuleLaunchKernel", "hipModuleLoadData", "hipMemsetD32", "hipGetDeviceCount"} <= called
    missing = sorted(name for name in called if not hasattr(hip, name))
    assert not missing, f"hip-python {hip_python} has no {missing}"


def test_launch_constants_and_error_enum_match(hip_python: str) -> None:
    from hip import hip

    assert hip_runner.LAUNCH_PARAM_BUFFER_POINTER == hip.HIP_LAUNCH_PARAM_BUFFER_POINTER
    assert hip_runner.LAUNCH_PARAM_BUFFER_SIZE == hip.HIP_LAUNCH_PARAM_BUFFER_SIZE
    assert hip_runner.LAUNCH_PARAM_END == hip.HIP_LAUNCH_PARAM_END
    assert hip_runner.error_name(hip.hipError_t.hipErrorNoDevice) == "hipErrorNoDevice"
    assert f"{hip.hipError_t.hipErrorNoDevice}" == "100"  # why the harness names errors itself
    props = hip.hipDeviceProp_t()
    for field in ("name", "gcnArchName", "multiProcessorCount", "l2CacheSize", "pciBusID", "pciDeviceID"):
        assert hasattr(props, field), field


@pytest.fixture
def real_runtime(hip_python: str) -> None:
    if ctypes.util.find_library("amdhip64") is None:
        pytest.skip("no libamdhip64 on this machine (Debian installs it with hipcc)")


def test_the_real_runtime_says_there_is_no_device(real_runtime: None) -> None:
    from hip import hip

    err, count = hip.hipGetDeviceCount()
    assert (err, count) == (hip.hipError_t.hipErrorNoDevice, 0)
    with pytest.raises(hip_runner.HipError, match="no ROCm device 0: hipGetDeviceCount: hipErrorNoDevice"):
        hip_runner.device_props(0)
    with pytest.raises(hip_runner.HipError, match=r"hipMalloc\(64\): hipErrorInvalidDevice"):
        hip_runner.check(hip.hipMalloc(64), "hipMalloc(64)")
    probe = subprocess.run(
        [sys.executable, "-m", "workers.harness.hip_runner", "--probe"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert probe.returncode == 1 and "Traceback" not in probe.stderr
    assert probe.stderr.strip() == "probe: no ROCm device 0: hipGetDeviceCount: hipErrorNoDevice, 0 device(s)"


def test_a_runtime_older_than_the_bindings_is_named(tmp_path: Path, hip_python: str) -> None:
    """hip-python for ROCm >= 6 needs hipGetDevicePropertiesR0600, which a ROCm 5 runtime lacks."""
    old = build_fake_device(tmp_path / "rocm5", "FAKE_ROCM5")
    probe = subprocess.run(
        [sys.executable, "-m", "workers.harness.hip_runner", "--probe"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        env=device_env(old, tmp_path / "log.jsonl"),
    )  # fmt: skip
    assert probe.returncode == 1 and "Traceback" not in probe.stderr
    assert f"this hip-python ({hip_python}) does not fit the host's HIP runtime" in probe.stderr
    assert "hipGetDevicePropertiesR0600" in probe.stderr


def test_the_fake_device_is_found_through_hip_python(fake_device: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-m", "workers.harness.hip_runner", "--probe"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        env=device_env(fake_device, tmp_path / "log.jsonl", FAKE_HIP_ARCH="gfx90a", FAKE_HIP_CUS="104"),
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    props = json.loads(probe.stdout)
    assert (props["arch"], props["compute_units"], props["l2_bytes"]) == ("gfx90a", 104, 4 << 20)
    assert props["uuid"] == b"FAKE-MI50-000001".hex() and props["runtime_version"] == "hip-runtime 60241134"
