"""The GPU worker images build, and what of them can run without a GPU does (`make compose-test`).

No GPU here: neither image launches a kernel. Inside the CUDA image NVRTC (from NVIDIA's pip wheels) compiles
every decode variant to an sm_90 cubin; inside the ROCm image the project's compilers build gfx906 and gfx942
code objects, and hip-python loads the HIP runtime and finds no device. Without the driver library (libcuda
comes from the NVIDIA toolkit at run time) the CUDA backend detects no device instead of raising.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.deploy.compose_harness import Compose

pytestmark = pytest.mark.compose

CUDA_CHECK = """
import json, pathlib, tempfile
from kernels.packages.build import compile_units
from kernels.packages.loader import builtin_packages
from workers.backends.cuda import BASE_OPTIONS, CudaBackend
from workers.harness.cuda_compile import compile_cubin, nvrtc_version
package = builtin_packages()["tb-decode"]
(unit,) = compile_units(package, "Q4_0", "cuda", package.space("cuda"))
defines = [f"-D{key}={value}" for key, value in sorted(unit.defines.items())]
names = sorted(set(unit.symbols(package).values()))
out = pathlib.Path(tempfile.mkdtemp())
result = compile_cubin(unit.source, out, "decode", [*BASE_OPTIONS, *defines], names)
detected = repr(CudaBackend(pathlib.Path(tempfile.mkdtemp())).detect())  # no libcuda here: None
print(json.dumps({"nvrtc": nvrtc_version(), "ok": result.ok, "log": result.log[-2000:],
                  "cubin_bytes": pathlib.Path(result.path).stat().st_size if result.ok else 0,
                  "symbols": len(result.symbols), "detected": detected}))
"""

ROCM_CHECK = """
import json, pathlib, tempfile
from kernels.packages.loader import builtin_packages
from workers.backends.rocm import RocmBackend
backend = RocmBackend(pathlib.Path(tempfile.mkdtemp()))
package = builtin_packages()["tb-decode"]
names = [v.name for v in package.space("rocm")]
built = {}
for arch in ("gfx906", "gfx942"):
    result = backend.build(package, arch, "Q4_0", package.space("rocm"))
    built[arch] = sorted(n for n, b in result.variants.items() if b.path)
from hip import hip
devices = hip.hipGetDeviceCount()  # (error, count): loads the HIP runtime, finds no GPU here
print(json.dumps({"variants": names, "built": built, "hip_devices": str(devices),
                  "detected": repr(backend.detect())}))
"""


def run_in_image(compose: Compose, image: str, script: str) -> dict[str, object]:
    proc = subprocess.run(
        [compose.engine_cli, "run", "--rm", "-i", "--network", "none", image, "python", "-"],
        input=script, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_the_cuda_and_rocm_worker_images_build_and_compile_without_a_gpu(compose_gpu: Compose) -> None:
    with compose_gpu.timed("build_cuda"):
        compose_gpu.run("build", "worker-sm90-gpu0", timeout=3600)
    with compose_gpu.timed("build_rocm"):
        compose_gpu.run("build", "worker-gfx906-gpu0", timeout=3600)

    cuda = run_in_image(compose_gpu, "tunebase-worker-cuda:13.0", CUDA_CHECK)
    assert cuda["ok"] and str(cuda["nvrtc"]).startswith("nvrtc 13."), cuda
    assert int(str(cuda["cubin_bytes"])) > 0 and int(str(cuda["symbols"])) == 20, cuda
    assert cuda["detected"] == "None", cuda

    rocm = run_in_image(compose_gpu, "tunebase-worker-rocm:6.2", ROCM_CHECK)
    built, variants = rocm["built"], rocm["variants"]
    assert isinstance(built, dict) and isinstance(variants, list), rocm
    assert built["gfx906"] == built["gfx942"] == sorted(variants), rocm
    assert rocm["detected"] == "None" and "hipErrorNoDevice" in str(rocm["hip_devices"]), rocm
    print("\ngpu-images:", json.dumps({"seconds": compose_gpu.timings, "cuda": cuda, "rocm": rocm}))
