// Shared helpers for every llamay CUDA kernel. Functions marked LLAMAY_HD compile for the host as
// well, so tests/unit/test_cuda_host_math.py can run the exact same format code on a CPU.
#pragma once

#include <cuda_fp16.h>

#define LLAMAY_HD __host__ __device__ __forceinline__

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef signed char i8;

// f16 bits to float. On the device the hardware conversion; on the host an exact bit conversion
// (NVRTC and nvcc's host pass both see this file, and neither needs the other's path).
LLAMAY_HD float half_bits_to_float(u16 h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    u32 sign = (u32)(h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1fu;
    u32 man = h & 0x3ffu;
    u32 bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: renormalise
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { u32 u; float f; } v;
    v.u = bits;
    return v.f;
#endif
}

// GGML blocks are packed (18, 20, 22, 34, 144, 210 bytes...), so only 2-byte alignment holds:
// multi-byte fields are assembled from bytes rather than read through wider pointers.
LLAMAY_HD u16 load_u16(const u8* p) { return (u16)(p[0] | (p[1] << 8)); }
LLAMAY_HD u32 load_u32(const u8* p) { return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24); }
LLAMAY_HD float load_f16(const u8* p) { return half_bits_to_float(load_u16(p)); }

#ifdef __CUDACC__
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
#endif
