/* AMD twins of the prefill GEMM (MFMA / sdot4): see prefill.hip. */
#pragma once
