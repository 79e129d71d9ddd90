"""setmaxnreg as the H200 enforces it: in the CPU emulator (tests/kernels/emu/tb_portability.h), the kernel.

Why: k2y's WIDE tile (640 threads: 4 consumer warpgroups + 1 producer) lowered the producer to 56 registers
and raised the consumers to 112. The registers move through the CTA's own pool, which holds only what the
launch gave (96 per thread at 640 threads: 480 per thread of a warpgroup, 56 + 4 x 112 = 504): two consumer
warpgroups got their registers, the other two spun in setmaxnreg.inc forever and every WIDE E2 / E3 variant
hung on the H200 (device call 12, bench/results/prefill-smoke-each-k2y-2026-12-01.log), while the emulator,
which skipped setmaxnreg, passed parity. The emulator now keeps the pool and aborts such a wait with a
message (k2y's kernel: "setmaxnreg.inc 112 of warpgroup 2 waits forever: the CTA pool holds 1024 registers,
it needs 2048"); the kernel's static_assert refuses the split at compile time.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kernels.test_prefill_emulated import EMU, build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# a 640-thread workgroup as the WIDE tile runs it: warpgroup 4 lowers, 0-3 raise (SKIP: one warp of the
# producer leaves before its warpgroup's setmaxnreg)
PROGRAM = r"""
#include "tb_portability.h"
template <int P, int C, bool SKIP>
void body() {
    const int wg = TB_TID / 128;
    if (wg == 4) {
        if (SKIP && TB_TID / 32 == 17) return;
        tbp_setmaxnreg_dec<P>();
        return;
    }
    tbp_setmaxnreg_inc<C>();
}
int main(int argc, char **argv) {
    const int mode = atoi(argv[1]);
    auto fn = mode == 0 ? body<32, 112, false> : mode == 1 ? body<56, 112, false> : body<32, 112, true>;
    tbemu::launch(1, 1, 1, 640, 0, fn);
    printf("done\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("setmaxnreg")
    (tmp / "p.cpp").write_text(PROGRAM)
    exe = tmp / "p"
    argv = ["g++", "-O1", "-std=c++17", "-w", "-DTB_EMU_NV=1", f"-I{EMU}", str(tmp / "p.cpp"), "-o", str(exe)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _run(exe: Path, mode: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), str(mode)], capture_output=True, text=True, timeout=120, check=False)


def test_a_split_inside_the_launch_registers_runs(program: Path) -> None:
    """32 + 4 x 112 = 480 = 5 x 96: every consumer gets its registers."""
    proc = _run(program, 0)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr


def test_k2y_split_waits_forever_in_the_emulator_too(program: Path) -> None:
    """56 + 4 x 112 = 504 > 480: the producer frees 4 x 128 x 40, two consumers take 2 x 128 x 16 each, the
    third finds 1024 of the 2048 it needs (what the H200 did: a hang, no output)."""
    proc = _run(program, 1)
    assert proc.returncode != 0
    assert "waits forever: the CTA pool holds 1024 registers, it needs 2048" in proc.stderr, proc.stderr
    assert "launch: 96 per thread x 640 threads" in proc.stderr, proc.stderr


def test_a_warp_that_skips_its_warpgroups_setmaxnreg_is_refused(program: Path) -> None:
    """.sync.aligned: every warp of the warpgroup executes the same setmaxnreg."""
    proc = _run(program, 2)
    assert proc.returncode != 0
    assert "exited without the setmaxnreg its warpgroup executes" in proc.stderr, proc.stderr


def test_the_kernel_refuses_a_split_past_the_launch_registers(tmp_path: Path) -> None:
    """prefill_ws.h's static_assert (TbpLaunchRegs): k2y's 56 / 112 does not compile."""
    with pytest.raises(AssertionError, match="setmaxnreg redistributes the CTA's launch registers"):
        build(tmp_path, "Q4_0", "N256/M128/W4x4/K4/S3/SK1/MB1/E2", defines=("TBP_WIDE_PREG=56",))
