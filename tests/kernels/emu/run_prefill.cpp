/* Host entry points around one emulated tb-prefill variant (see tb_portability.h beside this file).
 * Built by tests/kernels/test_prefill_emulated.py with the variant list, -DEMU_MAIN=<variant symbol> and
 * -DEMU_PREP=<prelaunch symbol>; called through ctypes with the same arguments the runner passes. */
#include "prefill.hip"

extern "C" void emu_prep(int gx, int gy, const tb_u8 *qs, const tb_u8 *qh, const tb_u8 *sc, const float *x,
                         float *y, tb_u8 *ws, int m, int n, int k) {
    tbemu::launch(gx, gy, 1, 256, 0, [=] { EMU_PREP(qs, qh, sc, x, y, ws, m, n, k); });
}

/* cx x cy: the variant's thread-block cluster shape (1 x 1 without clusters) */
extern "C" void emu_main(int gx, int gy, int gz, int threads, long shared, const tb_u8 *qs, const tb_u8 *qh,
                         const tb_u8 *sc, const float *x, float *y, tb_u8 *ws, int m, int n, int k, int cx, int cy) {
    tbemu::launch(gx, gy, gz, threads, (size_t)shared, [=] { EMU_MAIN(qs, qh, sc, x, y, ws, m, n, k); }, cx, cy);
}

/* the kernel's own shared-memory size for the compiled variant (the manifest must agree) */
extern "C" long emu_smem_bytes(void) { return (long)EMU_SMEM; }
