// Row and element ops: embedding lookup, add, mul, scale, SwiGLU, GeGLU, softcap, row selection.
#include "quant.cuh"

// out[t] = dequant(W[tokens[t]]) * scale. Launch: grid n_tokens, block 128. A float row of any
// width k is stored padded with zeros to whole groups (formats.stored_width): the last group
// writes only its first k % 8 values.
template <int TYPE>
__device__ __forceinline__ void embed(const u8* __restrict__ w, long long row_bytes, const int* tokens, int k,
                                      float scale, float* __restrict__ out) {
    const int t = blockIdx.x;
    const u8* row = w + (long long)tokens[t] * row_bytes;
    float v[8];
    for (int g = threadIdx.x; g < (k + 7) / 8; g += blockDim.x) {
        Format<TYPE>::dequant8(row, g, v);
        const int n = min(8, k - 8 * g);
        for (int i = 0; i < n; i++) out[(long long)t * k + 8 * g + i] = v[i] * scale;
    }
}

#define LLAMAY_EMBED(name, code)                                                                        \
    extern "C" __global__ void embed_##name(const u8* w, long long row_bytes, const int* tokens, int k, \
                                            float scale, float* out) {                                  \
        embed<code>(w, row_bytes, tokens, k, scale, out);                                               \
    }
LLAMAY_FOR_EACH_FORMAT(LLAMAY_EMBED)

// Element ops: launch grid ceil(n / 256), block 256.
#define LLAMAY_ELEMENT_INDEX                                         \
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; \
    if (i >= n) return;

extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
    LLAMAY_ELEMENT_INDEX
    out[i] = a[i] + b[i];
}

extern "C" __global__ void mul(const float* a, const float* b, float* out, long long n) {
    LLAMAY_ELEMENT_INDEX
    out[i] = a[i] * b[i];
}

extern "C" __global__ void scale(const float* x, float* out, long long n, float factor) {
    LLAMAY_ELEMENT_INDEX
    out[i] = x[i] * factor;
}

extern "C" __global__ void silu_mul(const float* gate, const float* up, float* out, long long n) {
    LLAMAY_ELEMENT_INDEX
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}

extern "C" __global__ void gelu_mul(const float* gate, const float* up, float* out, long long n) {
    LLAMAY_ELEMENT_INDEX
    const float g = gate[i];
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);  // sqrt(2/pi)
    out[i] = 0.5f * g * (1.0f + tanhf(inner)) * up[i];
}

extern "C" __global__ void softcap(const float* x, float* out, long long n, float cap) {
    LLAMAY_ELEMENT_INDEX
    out[i] = cap * tanhf(x[i] / cap);
}

// out[r] = x[rows[r]]. Launch: grid ceil(n_rows * width / 256), block 256.
extern "C" __global__ void select_rows(const float* x, const int* rows, float* out, int width, int n_rows) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n_rows * width) return;
    const int r = (int)(i / width), c = (int)(i % width);
    out[i] = x[(long long)rows[r] * width + c];
}
