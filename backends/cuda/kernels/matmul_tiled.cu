// Prefill matmul: Y[T, N] = X[T, K] . W[N, K]^T (+ bias) on tensor cores. Each 128-thread block
// owns a 64 x 64 output tile; per K step of 32 it dequantizes its 64 weight rows into an f16 tile in
// shared memory (the GGML blocks are never expanded in global memory), converts the activation
// tile to f16, and each warp accumulates a 32 x 32 sub-tile in f32 with 16x16x16 WMMA.
// Launch: block 128, grid (ceil(N / 64), ceil(T / 64)). Needs K % 32 == 0 (the plan checks).
#include <mma.h>
#include "quant.cuh"

using namespace nvcuda;

#define TILE_T 64
#define TILE_N 64
#define TILE_K 32
#define PAD_H 8   // f16 rows padded to 40: multiples of 16 bytes for wmma, fewer bank conflicts
#define PAD_F 4

template <int TYPE>
__device__ __forceinline__ void matmul_tiled(const u8* __restrict__ w, long long row_bytes,
                                             const float* __restrict__ x, int k,
                                             const float* __restrict__ bias, float* __restrict__ y,
                                             int n_tokens, int n) {
    __shared__ __align__(32) __half xs[TILE_T][TILE_K + PAD_H];
    __shared__ __align__(32) __half ws[TILE_N][TILE_K + PAD_H];
    __shared__ __align__(32) float cs[TILE_T][TILE_N + PAD_F];

    const int tid = threadIdx.x, warp = tid >> 5;
    const int n0 = blockIdx.x * TILE_N, t0 = blockIdx.y * TILE_T;
    const int wt = (warp >> 1) * 32, wn = (warp & 1) * 32;  // this warp's 32 x 32 sub-tile

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < k; k0 += TILE_K) {
        for (int i = tid; i < TILE_T * TILE_K; i += blockDim.x) {
            const int r = i / TILE_K, c = i % TILE_K, t = t0 + r;
            xs[r][c] = __float2half_rn(t < n_tokens ? x[(long long)t * k + k0 + c] : 0.0f);
        }
        for (int i = tid; i < TILE_N * (TILE_K / 8); i += blockDim.x) {
            const int r = i / (TILE_K / 8), g = i % (TILE_K / 8), row = n0 + r;
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (row < n) Format<TYPE>::dequant8(w + row * row_bytes, k0 / 8 + g, v);
#pragma unroll
            for (int e = 0; e < 8; e++) ws[r][g * 8 + e] = __float2half_rn(v[e]);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE_K; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &xs[wt + 16 * i][kk], TILE_K + PAD_H);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[wn + 16 * j][kk], TILE_K + PAD_H);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&cs[wt + 16 * i][wn + 16 * j], acc[i][j], TILE_N + PAD_F, wmma::mem_row_major);
    __syncthreads();
    for (int i = tid; i < TILE_T * TILE_N; i += blockDim.x) {
        const int r = i / TILE_N, c = i % TILE_N, t = t0 + r, col = n0 + c;
        if (t < n_tokens && col < n) y[(long long)t * n + col] = cs[r][c] + (bias ? bias[col] : 0.0f);
    }
}

#define LLAMAY_MATMUL(name, code)                                                                   \
    extern "C" __global__ void matmul_tiled_##name(const u8* w, long long row_bytes, const float* x, \
                                                   int k, const float* bias, float* y, int n_tokens, \
                                                   int n) {                                         \
        matmul_tiled<code>(w, row_bytes, x, k, bias, y, n_tokens, n);                               \
    }
LLAMAY_FOR_EACH_FORMAT(LLAMAY_MATMUL)
