// GGML weight formats, read in place: no kernel ever needs an f32 copy of a quantized matrix.
//
// Every format exposes the same two things:
//   BLOCK_ELEMS / BLOCK_BYTES        the block geometry (a row is K / BLOCK_ELEMS blocks)
//   dequant8(row, g, out)            elements [8g, 8g + 8) of a row as floats
// Eight consecutive elements always share one scale in every format here, so a group of eight is
// the unit of work for the decode dot product, the prefill tile loader and the embedding lookup.
#pragma once

#include "common.cuh"

// GGML type codes (gguf.GGMLQuantizationType values).
#define GGML_F32 0
#define GGML_F16 1
#define GGML_Q4_0 2
#define GGML_Q4_1 3
#define GGML_Q5_0 6
#define GGML_Q5_1 7
#define GGML_Q8_0 8
#define GGML_Q4_K 12
#define GGML_Q5_K 13
#define GGML_Q6_K 14
#define GGML_BF16 30

template <int TYPE> struct Format;

template <> struct Format<GGML_F32> {
    static const int BLOCK_ELEMS = 1, BLOCK_BYTES = 4;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* p = row + g * 32;
        for (int i = 0; i < 8; i++) {
            union { u32 u; float f; } v;
            v.u = load_u32(p + 4 * i);
            out[i] = v.f;
        }
    }
};

template <> struct Format<GGML_F16> {
    static const int BLOCK_ELEMS = 1, BLOCK_BYTES = 2;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* p = row + g * 16;
        for (int i = 0; i < 8; i++) out[i] = load_f16(p + 2 * i);
    }
};

template <> struct Format<GGML_BF16> {
    static const int BLOCK_ELEMS = 1, BLOCK_BYTES = 2;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* p = row + g * 16;
        for (int i = 0; i < 8; i++) {
            union { u32 u; float f; } v;
            v.u = (u32)load_u16(p + 2 * i) << 16;
            out[i] = v.f;
        }
    }
};

// Q4_0: d (f16), 16 bytes of nibbles; element i < 16 is the low nibble of byte i, i >= 16 the high
// nibble of byte i - 16; value = d * (q - 8).
template <> struct Format<GGML_Q4_0> {
    static const int BLOCK_ELEMS = 32, BLOCK_BYTES = 18;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 2) * BLOCK_BYTES;
        const int o = (g & 3) * 8;
        const float d = load_f16(b);
        const u8* qs = b + 2 + (o & 15);
        const int shift = o >= 16 ? 4 : 0;
        for (int i = 0; i < 8; i++) out[i] = d * (float)((int)((qs[i] >> shift) & 0xF) - 8);
    }
};

// Q4_1: d, m (f16), nibbles as Q4_0; value = d * q + m.
template <> struct Format<GGML_Q4_1> {
    static const int BLOCK_ELEMS = 32, BLOCK_BYTES = 20;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 2) * BLOCK_BYTES;
        const int o = (g & 3) * 8;
        const float d = load_f16(b), m = load_f16(b + 2);
        const u8* qs = b + 4 + (o & 15);
        const int shift = o >= 16 ? 4 : 0;
        for (int i = 0; i < 8; i++) out[i] = d * (float)((qs[i] >> shift) & 0xF) + m;
    }
};

// Q5_0: d, 32 high bits (bit i belongs to element i), nibbles as Q4_0; value = d * (q - 16).
template <> struct Format<GGML_Q5_0> {
    static const int BLOCK_ELEMS = 32, BLOCK_BYTES = 22;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 2) * BLOCK_BYTES;
        const int o = (g & 3) * 8;
        const float d = load_f16(b);
        const u32 qh = load_u32(b + 2);
        const u8* qs = b + 6 + (o & 15);
        const int shift = o >= 16 ? 4 : 0;
        for (int i = 0; i < 8; i++) {
            const int q = ((qs[i] >> shift) & 0xF) | (((qh >> (o + i)) & 1u) << 4);
            out[i] = d * (float)(q - 16);
        }
    }
};

// Q5_1: d, m, high bits, nibbles; value = d * q + m.
template <> struct Format<GGML_Q5_1> {
    static const int BLOCK_ELEMS = 32, BLOCK_BYTES = 24;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 2) * BLOCK_BYTES;
        const int o = (g & 3) * 8;
        const float d = load_f16(b), m = load_f16(b + 2);
        const u32 qh = load_u32(b + 4);
        const u8* qs = b + 8 + (o & 15);
        const int shift = o >= 16 ? 4 : 0;
        for (int i = 0; i < 8; i++) {
            const int q = ((qs[i] >> shift) & 0xF) | (((qh >> (o + i)) & 1u) << 4);
            out[i] = d * (float)q + m;
        }
    }
};

// Q8_0: d, 32 signed bytes; value = d * q.
template <> struct Format<GGML_Q8_0> {
    static const int BLOCK_ELEMS = 32, BLOCK_BYTES = 34;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 2) * BLOCK_BYTES;
        const float d = load_f16(b);
        const u8* qs = b + 2 + (g & 3) * 8;
        for (int i = 0; i < 8; i++) out[i] = d * (float)(i8)qs[i];
    }
};

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, packed in 12 bytes.
LLAMAY_HD void k_scale_min(int j, const u8* s, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K: 256 elements = 4 chunks of 64; chunk c is 32 bytes of nibbles: its first 32 elements are
// the low nibbles (sub-block 2c), the next 32 the high nibbles (sub-block 2c + 1).
template <> struct Format<GGML_Q4_K> {
    static const int BLOCK_ELEMS = 256, BLOCK_BYTES = 144;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 5) * BLOCK_BYTES;
        const int e = (g & 31) * 8;
        const int c = e >> 6, high = (e >> 5) & 1, l = e & 31;
        int sc, mn;
        k_scale_min(2 * c + high, b + 4, &sc, &mn);
        const float d = load_f16(b) * (float)sc, m = load_f16(b + 2) * (float)mn;
        const u8* qs = b + 16 + 32 * c + l;
        const int shift = high ? 4 : 0;
        for (int i = 0; i < 8; i++) out[i] = d * (float)((qs[i] >> shift) & 0xF) - m;
    }
};

// Q5_K: as Q4_K plus 32 bytes of high bits: bit (2c + high) of qh[l] is the fifth bit.
template <> struct Format<GGML_Q5_K> {
    static const int BLOCK_ELEMS = 256, BLOCK_BYTES = 176;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 5) * BLOCK_BYTES;
        const int e = (g & 31) * 8;
        const int c = e >> 6, high = (e >> 5) & 1, l = e & 31;
        int sc, mn;
        k_scale_min(2 * c + high, b + 4, &sc, &mn);
        const float d = load_f16(b) * (float)sc, m = load_f16(b + 2) * (float)mn;
        const u8* qh = b + 16 + l;
        const u8* qs = b + 48 + 32 * c + l;
        const int shift = high ? 4 : 0, hbit = 2 * c + high;
        for (int i = 0; i < 8; i++) {
            const int q = ((qs[i] >> shift) & 0xF) | (((qh[i] >> hbit) & 1) << 4);
            out[i] = d * (float)q - m;
        }
    }
};

// Q6_K: ql[128] low nibbles, qh[64] two high bits each, 16 signed 8-bit scales, d (f16) last.
// Half n (128 elements) has quarters qq of 32: low or high nibbles of ql[64n + 32(qq&1) + l],
// bits 2qq..2qq+1 of qh[32n + l], scale 8n + l/16 + 2qq; value = d * scale * (q - 32).
template <> struct Format<GGML_Q6_K> {
    static const int BLOCK_ELEMS = 256, BLOCK_BYTES = 210;
    static LLAMAY_HD void dequant8(const u8* row, int g, float* out) {
        const u8* b = row + (g >> 5) * BLOCK_BYTES;
        const int e = (g & 31) * 8;
        const int n = e >> 7, qq = (e >> 5) & 3, l = e & 31;
        const u8* ql = b + 64 * n + 32 * (qq & 1) + l;
        const u8* qh = b + 128 + 32 * n + l;
        const float d = load_f16(b + 208) * (float)(i8)b[192 + 8 * n + (l >> 4) + 2 * qq];
        const int shift = qq >= 2 ? 4 : 0, hshift = 2 * qq;
        for (int i = 0; i < 8; i++) {
            const int q = ((ql[i] >> shift) & 0xF) | (((qh[i] >> hshift) & 3) << 4);
            out[i] = d * (float)(q - 32);
        }
    }
};

// One lane's share of a row . x: lane handles groups lane, lane + lanes, ... The decode kernel
// sums the 32 partials with warp shuffles; the host test sums them in a loop.
template <int TYPE>
LLAMAY_HD float row_dot_lane(const u8* row, const float* x, int k, int lane, int lanes) {
    float acc = 0.0f;
    float w[8];
    for (int g = lane; g < k / 8; g += lanes) {
        Format<TYPE>::dequant8(row, g, w);
        const float* xg = x + 8 * g;
        for (int i = 0; i < 8; i++) acc += w[i] * xg[i];
    }
    return acc;
}

// Every format a kernel is instantiated for: X(name, code). Adding a format = a Format<> above
// plus one line here (and the name in llamay_backends.cuda.formats).
#define LLAMAY_FOR_EACH_FORMAT(X) \
    X(f32, GGML_F32) X(f16, GGML_F16) X(bf16, GGML_BF16) \
    X(q4_0, GGML_Q4_0) X(q4_1, GGML_Q4_1) X(q5_0, GGML_Q5_0) X(q5_1, GGML_Q5_1) X(q8_0, GGML_Q8_0) \
    X(q4_k, GGML_Q4_K) X(q5_k, GGML_Q5_K) X(q6_k, GGML_Q6_K)
