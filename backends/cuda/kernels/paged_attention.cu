// The KV cache on the device: kv_write stores a pass's K/V into the engine's pages, attention reads
// them back. Page addressing is kv_index/page_of in paging.cuh. Instantiated for f32 and f16 pages.
//
// Shapes never depend on the cache length: every length is read on the device (positions, kv_lens,
// page tables), so a captured CUDA graph replays unchanged for every decode step.
#include "paging.cuh"

#define ATTN_WARPS 4
#define ATTN_MAX_DIM 256  // per head; 8 values per lane

// Launch: grid n_tokens, block 256. Thread c < kw writes K column c, else V column c - kw.
template <typename KV>
__device__ __forceinline__ void kv_write(const float* __restrict__ k, const float* __restrict__ v, KV* pages,
                                         const int* positions, const int* seq_index, const int* page_tables,
                                         int pt_stride, int layer, int kw, int vw, int page_size, int n_layers) {
    const int t = blockIdx.x, pos = positions[t];
    const int page = page_of(page_tables, pt_stride, seq_index[t], pos, page_size), slot = pos % page_size;
    for (int c = threadIdx.x; c < kw + vw; c += blockDim.x) {
        if (c < kw)
            kv_store(pages + kv_index(page, layer, 0, slot, c, page_size, kw, vw, n_layers), k[(long long)t * kw + c]);
        else
            kv_store(pages + kv_index(page, layer, 1, slot, c - kw, page_size, kw, vw, n_layers),
                     v[(long long)t * vw + c - kw]);
    }
}

// Causal grouped-query attention of one query row and head over its sequence's pages.
// Launch: grid (n_heads, n_tokens), block 32 * ATTN_WARPS. Each warp walks keys warp, warp + 4, ...
// with an online softmax (running max m, sum l, weighted values acc); lane owns head dims
// lane + 32i. The warps' partial results are merged through shared memory at the end.
template <typename KV>
__device__ __forceinline__ void attention(const float* __restrict__ q, const KV* __restrict__ pages,
                                          const int* positions, const int* seq_index, const int* page_tables,
                                          int pt_stride, const int* kv_lens, float* __restrict__ out, int layer,
                                          int n_heads, int n_kv_heads, int dk, int dv, int page_size, int n_layers,
                                          float scale, float softcap, int window) {
    __shared__ float sm_m[ATTN_WARPS], sm_l[ATTN_WARPS];
    __shared__ float sm_acc[ATTN_WARPS][ATTN_MAX_DIM];

    const int h = blockIdx.x, t = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kvh = h / (n_heads / n_kv_heads);
    const int kw = n_kv_heads * dk, vw = n_kv_heads * dv;
    const int seq = seq_index[t], pos = positions[t];
    const int end = min(pos + 1, kv_lens[seq]);
    const int start = window > 0 ? max(0, pos - window + 1) : 0;
    const float neg_inf = __int_as_float(0xff800000);

    float qr[ATTN_MAX_DIM / 32], acc[ATTN_MAX_DIM / 32];
    const float* qh = q + (long long)t * n_heads * dk + h * dk;
#pragma unroll
    for (int i = 0; i < ATTN_MAX_DIM / 32; i++) {
        const int d = lane + 32 * i;
        qr[i] = d < dk ? qh[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = neg_inf, l = 0.0f;
    for (int j = start + warp; j < end; j += ATTN_WARPS) {
        const int page = page_of(page_tables, pt_stride, seq, j, page_size), slot = j % page_size;
        const KV* kp = pages + kv_index(page, layer, 0, slot, kvh * dk, page_size, kw, vw, n_layers);
        const KV* vp = pages + kv_index(page, layer, 1, slot, kvh * dv, page_size, kw, vw, n_layers);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < ATTN_MAX_DIM / 32; i++) {
            const int d = lane + 32 * i;
            if (d < dk) dot += qr[i] * kv_load(kp + d);
        }
        float s = warp_sum(dot) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        const float m_new = fmaxf(m, s);
        const float correction = __expf(m - m_new), p = __expf(s - m_new);
        l = l * correction + p;
#pragma unroll
        for (int i = 0; i < ATTN_MAX_DIM / 32; i++) {
            const int d = lane + 32 * i;
            acc[i] = acc[i] * correction + (d < dv ? p * kv_load(vp + d) : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATTN_MAX_DIM / 32; i++) {
        const int d = lane + 32 * i;
        if (d < dv) sm_acc[warp][d] = acc[i];
    }
    __syncthreads();
    float m_all = neg_inf;
    for (int w = 0; w < ATTN_WARPS; w++) m_all = fmaxf(m_all, sm_m[w]);
    float l_all = 0.0f, weights[ATTN_WARPS];
    for (int w = 0; w < ATTN_WARPS; w++) {
        weights[w] = sm_l[w] > 0.0f ? __expf(sm_m[w] - m_all) : 0.0f;  // idle warps weigh nothing
        l_all += sm_l[w] * weights[w];
    }
    float* oh = out + (long long)t * n_heads * dv + h * dv;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++) o += sm_acc[w][d] * weights[w];
        oh[d] = o / l_all;
    }
}

#define LLAMAY_KV_KERNELS(name, KV)                                                                     \
    extern "C" __global__ void kv_write_##name(const float* k, const float* v, KV* pages,               \
                                               const int* positions, const int* seq_index,              \
                                               const int* page_tables, int pt_stride, int layer, int kw, \
                                               int vw, int page_size, int n_layers) {                   \
        kv_write<KV>(k, v, pages, positions, seq_index, page_tables, pt_stride, layer, kw, vw, page_size, \
                     n_layers);                                                                         \
    }                                                                                                   \
    extern "C" __global__ void attention_##name(const float* q, const KV* pages, const int* positions,  \
                                                const int* seq_index, const int* page_tables,           \
                                                int pt_stride, const int* kv_lens, float* out, int layer, \
                                                int n_heads, int n_kv_heads, int dk, int dv,            \
                                                int page_size, int n_layers, float scale, float softcap, \
                                                int window) {                                           \
        attention<KV>(q, pages, positions, seq_index, page_tables, pt_stride, kv_lens, out, layer,      \
                      n_heads, n_kv_heads, dk, dv, page_size, n_layers, scale, softcap, window);       \
    }
LLAMAY_KV_KERNELS(f32, float)
LLAMAY_KV_KERNELS(f16, __half)
