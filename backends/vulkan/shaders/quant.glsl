// Weights in their GGML block layout, bound at binding 0 and read as 16-bit words (every block
// size used here is even, so each block starts on a word). decode_unit() turns one unit of 32
// consecutive elements of a row into floats; K-quant super-blocks hold 8 units.
#ifdef WORDS32
// Devices without 16-bit storage: the same bytes read as 32-bit words.
layout(binding = 0) readonly buffer Weights { uint wq[]; };
uint half_at(uint i) { return (wq[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu; }
#else
layout(binding = 0) readonly buffer Weights { uint16_t wq[]; };
uint half_at(uint i) { return uint(wq[i]); }
#endif

float f16_at(uint i) { return unpackHalf2x16(half_at(i)).x; }
uint byte_at(uint block, uint b) {
    uint h = half_at(block + (b >> 1));
    return (b & 1u) != 0u ? (h >> 8) : (h & 0xffu);
}
int signed_byte(uint b) { return int(b << 24) >> 24; }

#if defined(Q4_0)
const uint BLOCK_ELEMS = 32u, BLOCK_HALVES = 9u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + u * BLOCK_HALVES;
    float d = f16_at(b);
    for (uint i = 0u; i < 8u; i++) {
        uint h = half_at(b + 1u + i);
        w[2u * i] = d * (float(h & 15u) - 8.0);
        w[2u * i + 1u] = d * (float((h >> 8) & 15u) - 8.0);
        w[2u * i + 16u] = d * (float((h >> 4) & 15u) - 8.0);
        w[2u * i + 17u] = d * (float(h >> 12) - 8.0);
    }
}
#elif defined(Q4_1)
const uint BLOCK_ELEMS = 32u, BLOCK_HALVES = 10u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + u * BLOCK_HALVES;
    float d = f16_at(b), m = f16_at(b + 1u);
    for (uint i = 0u; i < 8u; i++) {
        uint h = half_at(b + 2u + i);
        w[2u * i] = d * float(h & 15u) + m;
        w[2u * i + 1u] = d * float((h >> 8) & 15u) + m;
        w[2u * i + 16u] = d * float((h >> 4) & 15u) + m;
        w[2u * i + 17u] = d * float(h >> 12) + m;
    }
}
#elif defined(Q5_0)
const uint BLOCK_ELEMS = 32u, BLOCK_HALVES = 11u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + u * BLOCK_HALVES;
    float d = f16_at(b);
    uint qh = half_at(b + 1u) | (half_at(b + 2u) << 16);
    for (uint j = 0u; j < 16u; j++) {
        uint q = byte_at(b + 3u, j);
        uint lo = (q & 15u) | (((qh >> j) << 4) & 16u);
        uint hi = (q >> 4) | ((qh >> (j + 12u)) & 16u);
        w[j] = d * (float(lo) - 16.0);
        w[j + 16u] = d * (float(hi) - 16.0);
    }
}
#elif defined(Q8_0)
const uint BLOCK_ELEMS = 32u, BLOCK_HALVES = 17u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + u * BLOCK_HALVES;
    float d = f16_at(b);
    for (uint i = 0u; i < 16u; i++) {
        uint h = half_at(b + 1u + i);
        w[2u * i] = d * float(signed_byte(h & 0xffu));
        w[2u * i + 1u] = d * float(signed_byte(h >> 8));
    }
}
#elif defined(Q4_K)
const uint BLOCK_ELEMS = 256u, BLOCK_HALVES = 72u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + (u >> 3) * BLOCK_HALVES;
    uint sub = u & 7u;
    float d = f16_at(b), dmin = f16_at(b + 1u);
    uint sc, m;
    if (sub < 4u) {
        sc = byte_at(b + 2u, sub) & 63u;
        m = byte_at(b + 2u, sub + 4u) & 63u;
    } else {
        sc = (byte_at(b + 2u, sub + 4u) & 15u) | ((byte_at(b + 2u, sub - 4u) >> 6) << 4);
        m = (byte_at(b + 2u, sub + 4u) >> 4) | ((byte_at(b + 2u, sub) >> 6) << 4);
    }
    float scale = d * float(sc), offset = dmin * float(m);
    uint shift = (sub & 1u) * 4u;
    uint q = b + 8u + (sub >> 1) * 16u;
    for (uint i = 0u; i < 16u; i++) {
        uint h = half_at(q + i);
        w[2u * i] = scale * float((h >> shift) & 15u) - offset;
        w[2u * i + 1u] = scale * float((h >> (8u + shift)) & 15u) - offset;
    }
}
#elif defined(Q6_K)
const uint BLOCK_ELEMS = 256u, BLOCK_HALVES = 105u;
void decode_unit(uint row, uint u, out float w[32]) {
    uint b = row + (u >> 3) * BLOCK_HALVES;
    uint sub = u & 7u, half_ = sub >> 2, c = sub & 3u;
    float d = f16_at(b + 104u);
    float s0 = d * float(signed_byte(byte_at(b, 192u + 8u * half_ + 2u * c)));
    float s1 = d * float(signed_byte(byte_at(b, 193u + 8u * half_ + 2u * c)));
    uint ql = b + 32u * half_ + (c & 1u) * 16u;
    uint qh = b + 64u + 16u * half_;
    uint lshift = (c >> 1) * 4u, hshift = 2u * c;
    for (uint i = 0u; i < 16u; i++) {
        uint l = half_at(ql + i), h = half_at(qh + i);
        float s = i < 8u ? s0 : s1;
        int q0 = int(((l >> lshift) & 15u) | (((h >> hshift) & 3u) << 4)) - 32;
        int q1 = int(((l >> (8u + lshift)) & 15u) | (((h >> (8u + hshift)) & 3u) << 4)) - 32;
        w[2u * i] = s * float(q0);
        w[2u * i + 1u] = s * float(q1);
    }
}
#elif defined(F16) || defined(F32)
// Float rows may have any length: element_at() reads one value (get_rows uses it for a tail).
#ifdef F16
const uint HALVES_PER_ELEMENT = 1u;
float element_at(uint row, uint i) { return f16_at(row + i); }
#else
const uint HALVES_PER_ELEMENT = 2u;
float element_at(uint row, uint i) { return uintBitsToFloat(half_at(row + 2u * i) | (half_at(row + 2u * i + 1u) << 16)); }
#endif
#define FLOAT_ROWS
const uint BLOCK_ELEMS = 1u, BLOCK_HALVES = HALVES_PER_ELEMENT;
void decode_unit(uint row, uint u, out float w[32]) {
    for (uint i = 0u; i < 32u; i++) w[i] = element_at(row, u * 32u + i);
}
#else
#error "define one weight type"
#endif

// First word of row `r` of a matrix whose rows hold `k` elements.
uint row_start(uint r, uint k) { return r * (k / BLOCK_ELEMS) * BLOCK_HALVES; }
