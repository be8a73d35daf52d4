// Decode matmul: y[t, row] = W[row] . x[t] (+ bias[row]) with one warp per output row. Each lane
// dequantizes groups of eight weights straight from the GGML blocks (row_dot_lane in quant.cuh) and
// the warp sums the 32 partials with shuffles. Launch: block (32, ROWS_PER_BLOCK), grid
// (ceil(n / ROWS_PER_BLOCK), n_tokens). Used when a pass has few tokens (decode, small batches).
#include "quant.cuh"

template <int TYPE>
__device__ __forceinline__ void matvec(const u8* __restrict__ w, long long row_bytes, const float* __restrict__ x,
                                       int k, const float* __restrict__ bias, float* __restrict__ y, int n) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    const int t = blockIdx.y;
    if (row >= n) return;  // the whole warp shares a row, so the shuffles below stay full-warp
    float acc = row_dot_lane<TYPE>(w + row * row_bytes, x + (long long)t * k, k, threadIdx.x, 32);
    acc = warp_sum(acc);
    if (threadIdx.x == 0) y[(long long)t * n + row] = acc + (bias ? bias[row] : 0.0f);
}

#define LLAMAY_MATVEC(name, code)                                                                  \
    extern "C" __global__ void matvec_##name(const u8* w, long long row_bytes, const float* x, int k, \
                                             const float* bias, float* y, int n) {                 \
        matvec<code>(w, row_bytes, x, k, bias, y, n);                                              \
    }
LLAMAY_FOR_EACH_FORMAT(LLAMAY_MATVEC)
