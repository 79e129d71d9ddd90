"""One compiler per cache key on a host (workers/compilers/lock.py): real processes, real NVRTC.

Two processes that reach the same unit at the same moment compile it once (the other waits and reuses
the cubin); a SIGKILLed holder leaves nothing that blocks; a unit NVRTC rejects is remembered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from workers.compilers.lock import is_locked, unit_lock
from workers.harness import cuda_driver as cd

needs_nvrtc = pytest.mark.skipif(cd.nvrtc is None, reason=f"NVRTC is not installed: {cd.IMPORT_ERROR}")

# heavy enough (a few hundred ms of NVRTC) that two unlocked compilers started together would both compile
TINY = r"""
template <int R>
__device__ float poly(float x) { float y = 0.f;
#pragma unroll
  for (int i = 0; i < R; ++i) y = y * x + (float)(i % 7);
  return y; }
extern "C" __global__ void tiny(float *y) { y[threadIdx.x] = poly<512>(y[threadIdx.x]); }
"""

COMPILER = r"""
import json, sys, time
from pathlib import Path
from workers.harness.cuda_compile import compile_cubin
source, art, start = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
while time.time() < start:  # both processes call at the same instant
    time.sleep(0.001)
r = compile_cubin(source, art, "tiny", ["--gpu-architecture=sm_90a"], ["tiny"])
print(json.dumps({"compiled": r.compiled, "ok": r.ok, "path": r.path, "seconds": r.seconds,
                  "waited_s": r.waited_s, "log": r.log[-500:]}))
"""

HOLDER = r"""
import sys, time
from pathlib import Path
from workers.compilers.lock import unit_lock
with unit_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@needs_nvrtc
def test_two_processes_compile_one_unit_once(tmp_path: Path) -> None:
    source = tmp_path / "tiny.cu"
    source.write_text(TINY)
    art = tmp_path / "art"
    start = time.time() + 3.0  # after both interpreters have imported cuda-python
    argv = [sys.executable, "-c", COMPILER, str(source), str(art), str(start)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO) for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(o["ok"] for o in outs), outs
    assert sorted(o["compiled"] for o in outs) == [False, True], outs  # one compiled, the other reused
    assert outs[0]["path"] == outs[1]["path"] and Path(outs[0]["path"]).is_file()
    compiled = next(o for o in outs if o["compiled"])
    reused = next(o for o in outs if not o["compiled"])
    assert compiled["seconds"] > 0 and reused["seconds"] == 0
    # the reuser either waited on the lock for the compile or came after it; it never compiled itself
    assert reused["waited_s"] is None or reused["waited_s"] <= compiled["seconds"] + 1.0
    assert sorted(p.name for p in Path(compiled["path"]).parent.iterdir() if not p.name.endswith(".tmp")) == [
        Path(compiled["path"]).name,
        Path(compiled["path"]).with_suffix(".lock").name,
        Path(compiled["path"]).with_suffix(".names.json").name,
    ]


def test_a_sigkilled_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    lock = tmp_path / "a" / "unit.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert is_locked(lock)
        with unit_lock(lock, wait_s=0.3) as waited:
            assert waited is None  # held by a live process: the waiter gives up and says so
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=20)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lock.exists()  # the file stays; the lock died with the process
    assert not is_locked(lock)
    with unit_lock(lock, wait_s=5) as waited:
        assert waited is not None and waited < 1.0


@needs_nvrtc
def test_a_rejected_unit_is_recorded_and_not_recompiled(tmp_path: Path) -> None:
    from workers.harness.cuda_compile import compile_cubin

    source = tmp_path / "bad.cu"
    source.write_text('extern "C" __global__ void bad(float *y) { y[0] = undefined_name; }\n')
    first = compile_cubin(source, tmp_path / "art", "bad", ["--gpu-architecture=sm_90a"], ["bad"])
    assert not first.ok and first.compiled and first.rejected
    assert "undefined_name" in first.log
    record = Path(first.path).with_suffix(".error.json")
    assert "undefined_name" in json.loads(record.read_text())["log"]
    again = compile_cubin(source, tmp_path / "art", "bad", ["--gpu-architecture=sm_90a"], ["bad"])
    assert not again.ok and not again.compiled and again.rejected and "undefined_name" in again.log
    assert not Path(again.path).exists()


KILLED_WRITER = r"""
import os, signal, sys, tempfile
from pathlib import Path
from workers.compilers.lock import temp_prefix
final = Path(sys.argv[1])
fd, tmp = tempfile.mkstemp(prefix=temp_prefix(final), suffix=".tmp", dir=final.parent)
os.write(fd, b"half a cubin")
print(tmp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no finally runs: the temporary stays
"""


@needs_nvrtc
def test_the_next_compiler_deletes_a_killed_compilers_temporaries(tmp_path: Path) -> None:
    from workers.harness.cuda_compile import compile_cubin

    source = tmp_path / "tiny.cu"
    source.write_text(TINY)
    art = tmp_path / "art"
    cubin = Path(compile_cubin(source, art, "tiny", ["--gpu-architecture=sm_90a"], ["tiny"]).path)
    cubin.unlink()  # as if the compile that wrote it had been killed before its last rename
    litter = []
    for final in (cubin, cubin.with_suffix(".names.json")):
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, str(final)], capture_output=True, text=True, env=_env(),
            cwd=REPO, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL
        litter.append(Path(proc.stdout.strip()))
    other_unit = cubin.parent / "someone-else.cubin.abc123.tmp"  # another unit's: not ours to delete
    other_unit.write_bytes(b"")
    assert all(p.is_file() for p in litter)
    again = compile_cubin(source, art, "tiny", ["--gpu-architecture=sm_90a"], ["tiny"])
    assert again.ok and again.compiled and Path(again.path) == cubin and cubin.is_file()
    assert not any(p.exists() for p in litter)
    assert other_unit.is_file()
    assert not [p.name for p in cubin.parent.glob(f"{cubin.name}.*.tmp")]
