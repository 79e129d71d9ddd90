/* A FAKE AMD GPU behind the real hip-python: the HIP runtime entry points that the harness reaches,
 * implemented over host memory. Built by the tests as libamdhip64.so and found first on
 * LD_LIBRARY_PATH, so hip-python's own Cython bindings (argument conversion, enums, struct layout,
 * the `extra` launch array) are the real ones and only the device is replaced.
 *
 * A "launch" reads the packed kernel-argument buffer at the offsets the kernels' C signatures imply
 * (kernels/library/tb-decode/decode.hip, tb-prefill/prefill.hip) and computes y = x * dequant(W)^T, which is
 * what a correct kernel would write. Each launch and NaN fill is appended to $FAKE_HIP_LOG as JSON;
 * $FAKE_HIP_CRASH / $FAKE_HIP_HANG / $FAKE_HIP_PARTIAL name a symbol that dies, hangs, or writes only
 * half of its output. $FAKE_HIP_ARCH and $FAKE_HIP_CUS describe the device (gfx906, 60 CUs).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int hipError_t;
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorInvalidImage = 200,
    hipErrorNotFound = 500,
};

/* hipDeviceProp_tR0600 (ROCm >= 6, 1472 bytes): the offsets hip-python 7.2 reads. */
#define PROP_SIZE 1472
#define PROP_NAME 0
#define PROP_CUS 388
#define PROP_PCI_BUS 584
#define PROP_PCI_DEVICE 588
#define PROP_L2 616
#define PROP_GCN_ARCH 1160
#define RUNTIME_VERSION 60241134 /* what a ROCm 6.2 runtime reports */

static const char *env_or(const char *name, const char *fallback) {
    const char *value = getenv(name);
    return value && *value ? value : fallback;
}

static int same_symbol(const char *env, const char *symbol) {
    const char *value = getenv(env);
    return value && strcmp(value, symbol) == 0;
}

/* -- device memory: host allocations whose sizes are remembered (a launch needs the scales size) -- */
typedef struct { void *ptr; size_t size; } Alloc;
static Alloc *allocs;
static size_t n_allocs, cap_allocs;

/* Bytes from ptr to the end of the allocation holding it (0: not device memory). */
static size_t alloc_size(const void *ptr) {
    const char *p = ptr;
    for (size_t i = 0; i < n_allocs; ++i) {
        const char *base = allocs[i].ptr;
        if (p >= base && p < base + allocs[i].size) return allocs[i].size - (size_t)(p - base);
    }
    return 0;
}

hipError_t hipGetDeviceCount(int *count) { *count = 1; return hipSuccess; }

/* Built with -DFAKE_ROCM5 the library exports only the ROCm 5 name, like Debian's libamdhip64 5.2:
 * a hip-python for ROCm >= 6 then cannot resolve hipGetDevicePropertiesR0600. */
#ifdef FAKE_ROCM5
#define hipGetDevicePropertiesR0600 hipGetDeviceProperties
#endif
hipError_t hipGetDevicePropertiesR0600(void *prop, int device) {
    if (device != 0 || prop == NULL) return hipErrorInvalidValue;
    char *p = (char *)prop;
    memset(p, 0, PROP_SIZE);
    snprintf(p + PROP_NAME, 256, "AMD Instinct MI50/MI60 (FAKE device)");
    snprintf(p + PROP_GCN_ARCH, 256, "%s:sramecc+:xnack-", env_or("FAKE_HIP_ARCH", "gfx906"));
    int cus = atoi(env_or("FAKE_HIP_CUS", "60")), l2 = 4 << 20, bus = 3, dev = 0x66A1;
    memcpy(p + PROP_CUS, &cus, 4);
    memcpy(p + PROP_L2, &l2, 4);
    memcpy(p + PROP_PCI_BUS, &bus, 4);
    memcpy(p + PROP_PCI_DEVICE, &dev, 4);
    return hipSuccess;
}

hipError_t hipDeviceGetUuid(void *uuid, int device) {
    if (device != 0) return hipErrorInvalidValue;
    memcpy(uuid, "FAKE-MI50-000001", 16);
    return hipSuccess;
}

hipError_t hipRuntimeGetVersion(int *version) { *version = RUNTIME_VERSION; return hipSuccess; }
hipError_t hipDriverGetVersion(int *version) { *version = RUNTIME_VERSION; return hipSuccess; }

hipError_t hipMalloc(void **ptr, size_t size) {
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, cap_allocs * sizeof(Alloc));
    }
    *ptr = calloc(1, size ? size : 1);
    allocs[n_allocs++] = (Alloc){*ptr, size};
    return hipSuccess;
}

hipError_t hipFree(void *ptr) {
    for (size_t i = 0; i < n_allocs; ++i)
        if (allocs[i].ptr == ptr) { allocs[i] = allocs[--n_allocs]; free(ptr); return hipSuccess; }
    return ptr == NULL ? hipSuccess : hipErrorInvalidValue;
}

hipError_t hipMemcpyHtoD(void *dst, const void *src, size_t size) {
    if (alloc_size(dst) < size) return hipErrorInvalidValue;
    memcpy(dst, src, size);
    return hipSuccess;
}

hipError_t hipMemcpyDtoH(void *dst, const void *src, size_t size) {
    if (alloc_size(src) < size) return hipErrorInvalidValue;
    memcpy(dst, src, size);
    return hipSuccess;
}

hipError_t hipMemcpyDtoD(void *dst, const void *src, size_t size) {
    if (alloc_size(dst) < size || alloc_size(src) < size) return hipErrorInvalidValue;
    memmove(dst, src, size);
    return hipSuccess;
}

hipError_t hipMemset(void *dst, int value, size_t size) {
    if (alloc_size(dst) < size) return hipErrorInvalidValue;
    memset(dst, value, size);
    return hipSuccess;
}

static void log_line(const char *line) {
    const char *path = getenv("FAKE_HIP_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (f) { fputs(line, f); fputc('\n', f); fclose(f); }
}

hipError_t hipMemsetD32(void *dst, int value, size_t count) {
    if (alloc_size(dst) < 4 * count) return hipErrorInvalidValue;
    uint32_t *words = dst;
    for (size_t i = 0; i < count; ++i) words[i] = (uint32_t)value;
    char line[256];
    snprintf(line, sizeof line, "{\"call\": \"hipMemsetD32\", \"ptr\": %llu, \"value\": %u, \"count\": %zu}",
             (unsigned long long)(uintptr_t)dst, (uint32_t)value, count);
    log_line(line);
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) { return hipSuccess; }

/* -- modules: the image is an AMDGPU ELF or a clang offload bundle; symbols are found by name -- */
typedef struct { const unsigned char *data; size_t size; } Module;
typedef struct { char symbol[256]; } Function;

static size_t elf_size(const unsigned char *p) {
    uint64_t shoff; uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3A, 2);
    memcpy(&shnum, p + 0x3C, 2);
    return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

static size_t bundle_size(const unsigned char *p) {
    uint64_t entries, end = 32, offset, size, id_len;
    const unsigned char *q = p + 24;
    memcpy(&entries, q, 8); q += 8;
    for (uint64_t i = 0; i < entries; ++i) {
        memcpy(&offset, q, 8); memcpy(&size, q + 8, 8); memcpy(&id_len, q + 16, 8);
        q += 24 + id_len;
        if (offset + size > end) end = offset + size;
    }
    return (size_t)end;
}

hipError_t hipModuleLoadData(void **module, const void *image) {
    const unsigned char *p = image;
    Module *m = malloc(sizeof *m);
    m->data = p;
    if (memcmp(p, "\x7f" "ELF", 4) == 0) m->size = elf_size(p);
    else if (memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0) m->size = bundle_size(p);
    else { free(m); *module = NULL; return hipErrorInvalidImage; }
    *module = m;
    return hipSuccess;
}

hipError_t hipModuleUnload(void *module) { free(module); return hipSuccess; }

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    Module *m = module;
    size_t len = strlen(name) + 1; /* the symbol string table holds it NUL-terminated */
    if (m == NULL || len > 255 || memmem(m->data, m->size, name, len) == NULL) return hipErrorNotFound;
    Function *f = malloc(sizeof *f);
    memcpy(f->symbol, name, len);
    *function = f;
    return hipSuccess;
}

/* -- launches -- */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        if (mant == 0) bits = sign;
        else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; --exp; }
            bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (mant << 13);
    else bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#define PTR(raw, off) (*(void *const *)((raw) + (off)))
#define INT(raw, off) (*(const int32_t *)((raw) + (off)))

/* tb-decode reads the tb-split layout (kernels/formats/split.py): qs qh sc x y workspace counters m n k
 * tiles grid_x. The fake knows the two formats the tests launch, told apart by the payload width:
 * Q8_0 (qs k bytes a row, fp16 d per 32) and Q4_0 (qs k/2 bytes a row, low nibbles = weights 0..15). */
static int gemv_split(const char *raw, int partial) {
    const uint8_t *qs = PTR(raw, 0), *sc = PTR(raw, 16);
    const float *x = PTR(raw, 24);
    float *y = PTR(raw, 32);
    int m = INT(raw, 56), n = INT(raw, 60), k = INT(raw, 64);
    if (m <= 0 || n <= 0 || k <= 0 || k % 32 || alloc_size(y) < 4 * (size_t)m * n) return hipErrorInvalidValue;
    size_t row = alloc_size(qs) / (size_t)n;
    int q8 = row == (size_t)k;
    if ((!q8 && row != (size_t)k / 2) || alloc_size(sc) < (size_t)n * (k / 32) * 2) return hipErrorInvalidValue;
    int rows = partial ? n / 2 : n;
    for (int i = 0; i < m; ++i)
        for (int r = 0; r < rows; ++r) {
            double acc = 0.0;
            for (int c = 0; c < k; ++c) {
                int b = c / 32, j = c % 32;
                uint16_t dbits;
                memcpy(&dbits, sc + ((size_t)r * (k / 32) + b) * 2, 2);
                float v;
                if (q8) {
                    v = (float)(int8_t)qs[(size_t)r * k + c];
                } else {
                    uint8_t byte = qs[(size_t)r * (k / 2) + (size_t)b * 16 + (j % 16)];
                    v = (float)((j < 16 ? byte & 15 : byte >> 4) - 8);
                }
                acc += (double)x[(size_t)i * k + c] * (double)(v * half_to_float(dbits));
            }
            y[(size_t)i * n + r] = (float)acc;
        }
    return hipSuccess;
}

static int gemv(const char *raw, int decode, int partial) {
    /* prefill (tb-packed): qs scales mins x y m n k */
    if (decode) return gemv_split(raw, partial);
    const int8_t *qs = PTR(raw, 0);
    const uint16_t *scales = PTR(raw, 8), *mins = PTR(raw, 16);
    const float *x = PTR(raw, 24);
    float *y = PTR(raw, 32);
    int base = 40, m = INT(raw, base), n = INT(raw, base + 4), k = INT(raw, base + 8);
    if (m <= 0 || n <= 0 || k <= 0 || alloc_size(scales) < 2 * (size_t)n) return hipErrorInvalidValue;
    size_t groups = alloc_size(scales) / 2 / (size_t)n, group = (size_t)k / groups;
    if (group == 0 || alloc_size(qs) < (size_t)n * k || alloc_size(y) < 4 * (size_t)m * n) return hipErrorInvalidValue;
    int rows = partial ? n / 2 : n;
    for (int i = 0; i < m; ++i)
        for (int r = 0; r < rows; ++r) {
            double acc = 0.0;
            for (int c = 0; c < k; ++c) {
                size_t g = (size_t)r * groups + (size_t)c / group;
                float w = (float)qs[(size_t)r * k + c] * half_to_float(scales[g]);
                if (mins) w += half_to_float(mins[g]);
                acc += (double)x[(size_t)i * k + c] * (double)w;
            }
            y[(size_t)i * n + r] = (float)acc;
        }
    return hipSuccess;
}

hipError_t hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)stream;
    Function *f = function;
    if (f == NULL || params != NULL || extra == NULL || (uintptr_t)extra[0] != 1 || (uintptr_t)extra[2] != 2 ||
        (uintptr_t)extra[4] != 3)
        return hipErrorInvalidValue;
    const char *raw = extra[1];
    size_t size = *(const size_t *)extra[3];
    char *line = malloc(512 + 2 * size), *w = line;
    w += sprintf(w, "{\"call\": \"launch\", \"symbol\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
                    "\"shared\": %u, \"raw\": \"", f->symbol, gx, gy, gz, bx, by, bz, shared);
    for (size_t i = 0; i < size; ++i) w += sprintf(w, "%02x", (unsigned char)raw[i]);
    strcpy(w, "\"}");
    log_line(line);
    free(line);
    if (same_symbol("FAKE_HIP_CRASH", f->symbol)) _exit(139);
    if (same_symbol("FAKE_HIP_HANG", f->symbol)) sleep(3600);
    return gemv(raw, strncmp(f->symbol, "tb_decode", 9) == 0, same_symbol("FAKE_HIP_PARTIAL", f->symbol));
}

/* -- events: host monotonic clock -- */
typedef struct { long long ns; } Event;

hipError_t hipEventCreate(void **event) { *event = calloc(1, sizeof(Event)); return hipSuccess; }

hipError_t hipEventRecord(void *event, void *stream) {
    (void)stream;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ((Event *)event)->ns = t.tv_sec * 1000000000LL + t.tv_nsec;
    return hipSuccess;
}

hipError_t hipEventSynchronize(void *event) { (void)event; return hipSuccess; }

hipError_t hipEventElapsedTime(float *ms, void *start, void *stop) {
    *ms = (float)(((Event *)stop)->ns - ((Event *)start)->ns) / 1e6f;
    return hipSuccess;
}

hipError_t hipEventDestroy(void *event) { free(event); return hipSuccess; }
