// Matmul over GGML blocks: y[t, row] = W[row] . x[t] (+ bias). One simdgroup per output row
// (decode); threadgroup tiles of 32 x 32 outputs with dequantized weights in threadgroup memory
// (prefill). Dispatch: matvec threadgroups (ceil(n / 4), T) of (32, 4); tiled (ceil(n/32), ceil(T/32)) of (32, 8).
struct MatParams { long row_bytes; int k; int n; int n_tokens; int has_bias; };

#define LLAMAY_MATVEC(name)                                                                          \
kernel void matvec_##name(device const u8* w [[buffer(0)]], device const float* x [[buffer(1)]],       \
                          device const float* bias [[buffer(2)]], device float* y [[buffer(3)]],       \
                          constant MatParams& p [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]], \
                          uint3 tid [[thread_position_in_threadgroup]]) {                               \
    int row = tg.x * 4 + tid.y, t = tg.y;                                                              \
    if (row >= p.n) return;                                                                            \
    device const u8* r = w + row * p.row_bytes;                                                        \
    device const float* xt = x + long(t) * p.k;                                                       \
    float acc = 0.0f, v[8];                                                                            \
    for (int g = tid.x; g < p.k / 8; g += 32) {                                                        \
        dequant8_##name(r, g, v);                                                                      \
        for (int i = 0; i < 8; i++) acc += v[i] * xt[8 * g + i];                                       \
    }                                                                                                  \
    acc = simd_sum(acc);                                                                               \
    if (tid.x == 0) y[long(t) * p.n + row] = acc + (p.has_bias ? bias[row] : 0.0f);                    \
}
LLAMAY_FOR_EACH_FORMAT(LLAMAY_MATVEC)

#define LLAMAY_MATMUL_TILED(name)                                                                     \
kernel void matmul_tiled_##name(device const u8* w [[buffer(0)]], device const float* x [[buffer(1)]], \
                                device const float* bias [[buffer(2)]], device float* y [[buffer(3)]], \
                                constant MatParams& p [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]], \
                                uint3 tid [[thread_position_in_threadgroup]]) {                        \
    threadgroup float xs[32][33];                                                                      \
    threadgroup float ws[32][33];                                                                      \
    int lin = tid.y * 32 + tid.x, n0 = tg.x * 32, t0 = tg.y * 32;                                      \
    float acc[4] = {0, 0, 0, 0};                                                                       \
    for (int k0 = 0; k0 < p.k; k0 += 32) {                                                             \
        for (int i = lin; i < 32 * 32; i += 256) {                                                     \
            int r = i / 32, c = i % 32, t = t0 + r;                                                    \
            xs[r][c] = t < p.n_tokens ? x[long(t) * p.k + k0 + c] : 0.0f;                               \
        }                                                                                              \
        if (lin < 128) {                                                                               \
            int r = lin / 4, g = lin % 4, row = n0 + r;                                                \
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                     \
            if (row < p.n) dequant8_##name(w + row * p.row_bytes, k0 / 8 + g, v);                      \
            for (int e = 0; e < 8; e++) ws[r][g * 8 + e] = v[e];                                       \
        }                                                                                              \
        threadgroup_barrier(mem_flags::mem_threadgroup);                                               \
        for (int j = 0; j < 4; j++)                                                                    \
            for (int kk = 0; kk < 32; kk++) acc[j] += xs[tid.y * 4 + j][kk] * ws[tid.x][kk];           \
        threadgroup_barrier(mem_flags::mem_threadgroup);                                               \
    }                                                                                                  \
    for (int j = 0; j < 4; j++) {                                                                      \
        int t = t0 + tid.y * 4 + j, col = n0 + tid.x;                                                  \
        if (t < p.n_tokens && col < p.n) y[long(t) * p.n + col] = acc[j] + (p.has_bias ? bias[col] : 0.0f); \
    }                                                                                                  \
}
LLAMAY_FOR_EACH_FORMAT(LLAMAY_MATMUL_TILED)
