/*
 * Standalone CUDA parity harness for decode.hip + prefill.hip (used by tests/kernels/test_gpu_parity.py).
 *
 *   nvcc -arch=sm_90 -O3 -std=c++17 -DTB_ASYMMETRIC=0|1 -DTB_GROUP=32|16 -I.. -o cuda_parity cuda_parity.cu
 *   cuda_parity DIR
 *
 * DIR holds meta.txt ("m n k"), qs.bin, scales.bin, mins.bin (asymmetric only), x.bin and
 * launches.txt, one line per dispatch: "symbol grid_x grid_y block_x rows_per_wave counters
 * workspace_floats" (geometry from kernels/families/abi.py). For each line the harness NaN-fills
 * y, launches twice (the second launch checks that split-K counters were left at zero) and
 * writes y of the second launch to DIR/y_<symbol>.bin; "same=0" in its report means the two
 * launches differed bit for bit.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decode.hip"
#include "prefill.hip"

struct Entry {
    const char *name;
    const void *fn;
};

#undef TB_DECODE_VARIANT
#define TB_DECODE_VARIANT(KB, TW) {"tb_decode_kb" #KB "_tw" #TW, (const void *)tb_decode_kb##KB##_tw##TW},
#undef TB_PREFILL_VARIANT
#define TB_PREFILL_VARIANT(NT, MT, MB, U) \
    {"tb_prefill_n" #NT "_mt" #MT "_mb" #MB "_u" #U, (const void *)tb_prefill_n##NT##_mt##MT##_mb##MB##_u##U},
static const Entry kTable[] = {TB_DECODE_VARIANTS TB_PREFILL_VARIANTS};

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static std::vector<char> slurp(const std::string &path, bool required) {
    std::vector<char> buf;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) {
        if (required) {
            fprintf(stderr, "cannot open %s\n", path.c_str());
            exit(1);
        }
        return buf;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf.resize((size_t)size);
    if (size && fread(buf.data(), 1, (size_t)size, f) != (size_t)size) exit(1);
    fclose(f);
    return buf;
}

static void *upload(const std::vector<char> &host) {
    if (host.empty()) return nullptr;
    void *dev = nullptr;
    CHECK(cudaMalloc(&dev, host.size()));
    CHECK(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
    return dev;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    int m = 0, n = 0, k = 0;
    {
        FILE *f = fopen((dir + "/meta.txt").c_str(), "r");
        if (!f || fscanf(f, "%d %d %d", &m, &n, &k) != 3) return 1;
        fclose(f);
    }
    void *qs = upload(slurp(dir + "/qs.bin", true));
    void *scales = upload(slurp(dir + "/scales.bin", true));
    void *mins = upload(slurp(dir + "/mins.bin", false));
    void *x = upload(slurp(dir + "/x.bin", true));
    float *y = nullptr;
    CHECK(cudaMalloc(&y, sizeof(float) * (size_t)m * (size_t)n));
    std::vector<float> y1((size_t)m * n), y2((size_t)m * n), nan_fill((size_t)m * n, __builtin_nanf(""));

    FILE *lf = fopen((dir + "/launches.txt").c_str(), "r");
    if (!lf) return 1;
    char sym[128];
    int gx, gy, bx, rpw, ncounters;
    long long wsf;
    int failures = 0;
    while (fscanf(lf, "%127s %d %d %d %d %d %lld", sym, &gx, &gy, &bx, &rpw, &ncounters, &wsf) == 7) {
        const void *fn = nullptr;
        for (const Entry &e : kTable)
            if (strcmp(e.name, sym) == 0) fn = e.fn;
        if (!fn) {
            printf("%s missing\n", sym);
            ++failures;
            continue;
        }
        float *ws = nullptr;
        unsigned *counters = nullptr;
        if (wsf > 0) CHECK(cudaMalloc(&ws, sizeof(float) * (size_t)wsf));
        if (ncounters > 0) {
            CHECK(cudaMalloc(&counters, sizeof(unsigned) * (size_t)ncounters));
            CHECK(cudaMemset(counters, 0, sizeof(unsigned) * (size_t)ncounters));
        }
        const bool is_decode = strncmp(sym, "tb_decode", 9) == 0;
        void *dargs[] = {&qs, &scales, &mins, &x, &y, &ws, &counters, &m, &n, &k, &rpw};
        void *pargs[] = {&qs, &scales, &mins, &x, &y, &m, &n, &k};
        for (int run = 0; run < 2; ++run) {
            CHECK(cudaMemcpy(y, nan_fill.data(), sizeof(float) * nan_fill.size(), cudaMemcpyHostToDevice));
            CHECK(cudaLaunchKernel(fn, dim3(gx, gy, 1), dim3(bx, 1, 1), is_decode ? dargs : pargs, 0, 0));
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(run ? y2.data() : y1.data(), y, sizeof(float) * y1.size(), cudaMemcpyDeviceToHost));
        }
        const bool same = memcmp(y1.data(), y2.data(), sizeof(float) * y1.size()) == 0;
        FILE *out = fopen((dir + "/y_" + sym + ".bin").c_str(), "wb");
        fwrite(y2.data(), sizeof(float), y2.size(), out);
        fclose(out);
        printf("%s same=%d\n", sym, same ? 1 : 0);
        if (ws) cudaFree(ws);
        if (counters) cudaFree(counters);
    }
    fclose(lf);
    return failures ? 1 : 0;
}
