// llamay Metal kernels, part 1: shared helpers and the GGML formats, read in place.
// Metal compiles one source string (newLibraryWithSource), so kernel_sources.py joins the .metal
// files of this folder in name order; later files use what earlier ones define.
// Written against the CUDA kernels' math (backends/cuda/kernels); never run: no Mac in this project.
#include <metal_stdlib>
using namespace metal;

typedef uchar u8;

inline float load_f16(device const u8* p) { return float(as_type<half>(ushort(p[0] | (p[1] << 8)))); }
inline uint load_u32(device const u8* p) { return uint(p[0]) | (uint(p[1]) << 8) | (uint(p[2]) << 16) | (uint(p[3]) << 24); }

// Elements [8g, 8g + 8) of a row, for each format: the unit every kernel works in.
inline void dequant8_f32(device const u8* row, int g, thread float* out) {
    for (int i = 0; i < 8; i++) out[i] = as_type<float>(load_u32(row + 32 * g + 4 * i));
}
inline void dequant8_f16(device const u8* row, int g, thread float* out) {
    for (int i = 0; i < 8; i++) out[i] = load_f16(row + 16 * g + 2 * i);
}
inline void dequant8_q4_0(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 2) * 18;
    int o = (g & 3) * 8, shift = o >= 16 ? 4 : 0;
    float d = load_f16(b);
    for (int i = 0; i < 8; i++) out[i] = d * float(int((b[2 + (o & 15) + i] >> shift) & 0xF) - 8);
}
inline void dequant8_q4_1(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 2) * 20;
    int o = (g & 3) * 8, shift = o >= 16 ? 4 : 0;
    float d = load_f16(b), m = load_f16(b + 2);
    for (int i = 0; i < 8; i++) out[i] = d * float((b[4 + (o & 15) + i] >> shift) & 0xF) + m;
}
inline void dequant8_q5_0(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 2) * 22;
    int o = (g & 3) * 8, shift = o >= 16 ? 4 : 0;
    float d = load_f16(b);
    uint qh = load_u32(b + 2);
    for (int i = 0; i < 8; i++) {
        int q = int((b[6 + (o & 15) + i] >> shift) & 0xF) | int(((qh >> (o + i)) & 1u) << 4);
        out[i] = d * float(q - 16);
    }
}
inline void dequant8_q8_0(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 2) * 34;
    float d = load_f16(b);
    for (int i = 0; i < 8; i++) out[i] = d * float(as_type<char>(b[2 + (g & 3) * 8 + i]));
}
inline void k_scale_min(int j, device const u8* s, thread int& sc, thread int& m) {
    if (j < 4) { sc = s[j] & 63; m = s[j + 4] & 63; }
    else { sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4); m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}
inline void dequant8_q4_k(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 5) * 144;
    int e = (g & 31) * 8, c = e >> 6, high = (e >> 5) & 1, l = e & 31;
    int sc, mn;
    k_scale_min(2 * c + high, b + 4, sc, mn);
    float d = load_f16(b) * float(sc), m = load_f16(b + 2) * float(mn);
    for (int i = 0; i < 8; i++) out[i] = d * float((b[16 + 32 * c + l + i] >> (high ? 4 : 0)) & 0xF) - m;
}
inline void dequant8_q6_k(device const u8* row, int g, thread float* out) {
    device const u8* b = row + (g >> 5) * 210;
    int e = (g & 31) * 8, n = e >> 7, qq = (e >> 5) & 3, l = e & 31;
    device const u8* ql = b + 64 * n + 32 * (qq & 1) + l;
    device const u8* qh = b + 128 + 32 * n + l;
    float d = load_f16(b + 208) * float(as_type<char>(b[192 + 8 * n + (l >> 4) + 2 * qq]));
    for (int i = 0; i < 8; i++) {
        int q = int((ql[i] >> (qq >= 2 ? 4 : 0)) & 0xF) | int(((qh[i] >> (2 * qq)) & 3) << 4);
        out[i] = d * float(q - 32);
    }
}

// One function per format name, so each kernel below is stamped out per format by a macro.
#define LLAMAY_FOR_EACH_FORMAT(X) X(f32) X(f16) X(q4_0) X(q4_1) X(q5_0) X(q8_0) X(q4_k) X(q6_k)

// KV page layout: identical to backends/cuda/kernels/paging.cuh (and the reference's read_page order).
inline long kv_index(int page, int layer, int is_v, int slot, int col, int page_size, int kw, int vw, int n_layers) {
    long layer_elems = long(page_size) * (kw + vw);
    long i = long(page) * n_layers * layer_elems + long(layer) * layer_elems;
    i += is_v ? long(page_size) * kw + long(slot) * vw : long(slot) * kw;
    return i + col;
}

struct PageParams { int pt_stride; int layer; int kw; int vw; int page_size; int n_layers; };
