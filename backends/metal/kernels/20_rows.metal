// Embedding lookup, rms_norm, rope, and the element ops.
struct EmbedParams { long row_bytes; int k; float scale; };

#define LLAMAY_EMBED(name)                                                                            \
kernel void embed_##name(device const u8* w [[buffer(0)]], device const int* tokens [[buffer(1)]],      \
                         device float* out [[buffer(2)]], constant EmbedParams& p [[buffer(3)]],       \
                         uint t [[threadgroup_position_in_grid]], uint tid [[thread_position_in_threadgroup]], \
                         uint nt [[threads_per_threadgroup]]) {                                        \
    device const u8* row = w + long(tokens[t]) * p.row_bytes;                                          \
    float v[8];                                                                                        \
    for (int g = tid; g < p.k / 8; g += nt) {                                                          \
        dequant8_##name(row, g, v);                                                                    \
        for (int i = 0; i < 8; i++) out[long(t) * p.k + 8 * g + i] = v[i] * p.scale;                   \
    }                                                                                                  \
}
LLAMAY_FOR_EACH_FORMAT(LLAMAY_EMBED)

struct NormParams { int width; int group; float eps; float weight_offset; int has_weight; };

// Dispatch: threadgroups (width / group, rows) of 256.
kernel void rms_norm(device const float* x [[buffer(0)]], device const float* weight [[buffer(1)]],
                     device float* out [[buffer(2)]], constant NormParams& p [[buffer(3)]],
                     uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_position_in_threadgroup]],
                     uint simd_lane [[thread_index_in_simdgroup]], uint simd_id [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[32];
    long base = long(tg.y) * p.width + long(tg.x) * p.group;
    float ss = 0.0f;
    for (int c = tid; c < p.group; c += 256) ss += x[base + c] * x[base + c];
    ss = simd_sum(ss);
    if (simd_lane == 0) partial[simd_id] = ss;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (int i = 0; i < 8; i++) total += partial[i];
    float inv = rsqrt(total / float(p.group) + p.eps);
    for (int c = tid; c < p.group; c += 256)
        out[base + c] = x[base + c] * inv * (p.has_weight ? weight[c] + p.weight_offset : 1.0f);
}

struct RopeParams { int n_tokens; int n_heads; int head_dim; int n_rot; int neox; float base; float freq_scale; };

// One thread per element. Metal has no double: the angle is float (as llama.cpp's Metal backend).
kernel void rope(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 device const int* positions [[buffer(2)]], constant RopeParams& p [[buffer(3)]],
                 uint idx [[thread_position_in_grid]]) {
    if (idx >= uint(p.n_tokens * p.n_heads * p.head_dim)) return;
    int d = idx % p.head_dim, t = idx / (p.n_heads * p.head_dim);
    uint head = idx - d;
    if (d >= p.n_rot) { out[idx] = x[idx]; return; }
    int half_rot = p.n_rot / 2;
    int i = p.neox ? d % half_rot : d / 2;
    int first = p.neox ? i : 2 * i, second = p.neox ? i + half_rot : 2 * i + 1;
    float theta = float(positions[t]) * p.freq_scale * pow(p.base, -2.0f * float(i) / float(p.n_rot));
    float s = sin(theta), c = cos(theta), a = x[head + first], b = x[head + second];
    out[idx] = d == first ? a * c - b * s : a * s + b * c;
}

kernel void add(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]], device float* out [[buffer(2)]],
                constant long& n [[buffer(3)]], uint i [[thread_position_in_grid]]) { if (i < n) out[i] = a[i] + b[i]; }
kernel void mul(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]], device float* out [[buffer(2)]],
                constant long& n [[buffer(3)]], uint i [[thread_position_in_grid]]) { if (i < n) out[i] = a[i] * b[i]; }
kernel void silu_mul(device const float* g [[buffer(0)]], device const float* u [[buffer(1)]], device float* out [[buffer(2)]],
                     constant long& n [[buffer(3)]], uint i [[thread_position_in_grid]]) {
    if (i < n) out[i] = g[i] / (1.0f + exp(-g[i])) * u[i];
}
kernel void gelu_mul(device const float* g [[buffer(0)]], device const float* u [[buffer(1)]], device float* out [[buffer(2)]],
                     constant long& n [[buffer(3)]], uint i [[thread_position_in_grid]]) {
    if (i < n) out[i] = 0.5f * g[i] * (1.0f + precise::tanh(0.7978845608f * (g[i] + 0.044715f * g[i] * g[i] * g[i]))) * u[i];
}
kernel void scale(device const float* x [[buffer(0)]], device float* out [[buffer(1)]], constant long& n [[buffer(2)]],
                  constant float& factor [[buffer(3)]], uint i [[thread_position_in_grid]]) { if (i < n) out[i] = x[i] * factor; }
kernel void softcap(device const float* x [[buffer(0)]], device float* out [[buffer(1)]], constant long& n [[buffer(2)]],
                    constant float& cap [[buffer(3)]], uint i [[thread_position_in_grid]]) {
    if (i < n) out[i] = cap * precise::tanh(x[i] / cap);
}
kernel void select_rows(device const float* x [[buffer(0)]], device const int* rows [[buffer(1)]], device float* out [[buffer(2)]],
                        constant int2& wn [[buffer(3)]], uint i [[thread_position_in_grid]]) {
    if (i >= uint(wn.x * wn.y)) return;
    out[i] = x[long(rows[i / wn.x]) * wn.x + i % wn.x];
}
