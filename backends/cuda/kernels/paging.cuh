// Where a cached K or V value lives. The page store is one flat array of pages; page p holds, for
// each layer in order, K [page_size, kw] then V [page_size, vw] (kw = n_kv_heads * key_dim). This
// is byte-for-byte the order the reference backend's read_page produces, so snapshots move between
// backends. llamay_backends.cuda.paging.PageLayout mirrors this function on the host.
#pragma once

#include "common.cuh"

LLAMAY_HD long long kv_index(int page, int layer, int is_v, int slot, int col,
                             int page_size, int kw, int vw, int n_layers) {
    const long long layer_elems = (long long)page_size * (kw + vw);
    long long i = (long long)page * n_layers * layer_elems + (long long)layer * layer_elems;
    if (is_v) i += (long long)page_size * kw + (long long)slot * vw;
    else i += (long long)slot * kw;
    return i + col;
}

// The page holding position `pos` of sequence `seq`: page tables arrive as one [S, stride] array.
LLAMAY_HD int page_of(const int* page_tables, int stride, int seq, int pos, int page_size) {
    return page_tables[seq * stride + pos / page_size];
}

#ifdef __CUDACC__
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void kv_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void kv_store(__half* p, float v) { *p = __float2half_rn(v); }
#endif
