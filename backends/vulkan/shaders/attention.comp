#version 450
// Causal grouped-query attention of one (token, head) per workgroup over the layer's pages.
// Keys are visited in chunks of CHUNK: scores go to shared memory, then each thread updates its
// output dims with an online softmax, so any context length fits in fixed shared memory.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
layout(binding = 1) readonly buffer Q { float q[]; };
layout(binding = 2) writeonly buffer Out { float o[]; };

#define N_HEADS pc.u[0]
#define N_KV_HEADS pc.u[1]
#define KEY_DIM pc.u[2]
#define VALUE_DIM pc.u[3]
#define SCALE pc_float(4)
#define SOFTCAP pc_float(5)
#define WINDOW pc.u[6]
#define PAGE_SIZE pc.u[7]

const uint CHUNK = 256u;
const uint MAX_DIMS = 4u;  // value dims per thread: VALUE_DIM <= 256
shared float scores[CHUNK];
shared float qs[256];
shared float red[64];

float reduce_max(float v, uint lid) {
    red[lid] = v;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lid < s) red[lid] = max(red[lid], red[lid + s]);
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

float reduce_sum(float v, uint lid) {
    red[lid] = v;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
    uint kvh = h / (N_HEADS / N_KV_HEADS);
    uint kw = N_KV_HEADS * KEY_DIM, vw = N_KV_HEADS * VALUE_DIM;
    uint seq = uint(meta_seq(t));
    int pos = meta_position(t);
    uint end = uint(min(pos + 1, meta_kv_len(seq)));
    uint start = WINDOW > 0u ? uint(max(pos - int(WINDOW) + 1, 0)) : 0u;
    for (uint i = lid; i < KEY_DIM; i += 64u) qs[i] = q[(t * N_HEADS + h) * KEY_DIM + i];
    barrier();

    float m = -1.0 / 0.0, l = 0.0;
    float acc[MAX_DIMS];
    for (uint d = 0u; d < MAX_DIMS; d++) acc[d] = 0.0;
    for (uint c0 = start; c0 < end; c0 += CHUNK) {
        uint n = min(CHUNK, end - c0);
        float local_max = -1.0 / 0.0;
        for (uint j = lid; j < n; j += 64u) {
            uint p = c0 + j;
            uint kb = kv_key(meta_page(seq, p, PAGE_SIZE), p % PAGE_SIZE, PAGE_SIZE, kw, vw) + kvh * KEY_DIM;
            float s = 0.0;
            for (uint i = 0u; i < KEY_DIM; i++) s += qs[i] * float(kv[kb + i]);
            s *= SCALE;
            if (SOFTCAP > 0.0) s = SOFTCAP * safe_tanh(s / SOFTCAP);
            scores[j] = s;
            local_max = max(local_max, s);
        }
        float m_new = max(m, reduce_max(local_max, lid));
        float local_sum = 0.0;
        for (uint j = lid; j < n; j += 64u) {
            float e = exp(scores[j] - m_new);
            scores[j] = e;
            local_sum += e;
        }
        float chunk_sum = reduce_sum(local_sum, lid);  // its barriers also publish scores[]
        float alpha = exp(m - m_new);
        l = l * alpha + chunk_sum;
        for (uint d = 0u; d < MAX_DIMS; d++) acc[d] *= alpha;
        for (uint j = 0u; j < n; j++) {
            uint p = c0 + j;
            uint vb = kv_value(meta_page(seq, p, PAGE_SIZE), p % PAGE_SIZE, PAGE_SIZE, kw, vw) + kvh * VALUE_DIM;
            float e = scores[j];
            for (uint d = 0u; d < MAX_DIMS; d++) {
                uint dim = lid + d * 64u;
                if (dim < VALUE_DIM) acc[d] += e * float(kv[vb + dim]);
            }
        }
        m = m_new;
        barrier();
    }
    for (uint d = 0u; d < MAX_DIMS; d++) {
        uint dim = lid + d * 64u;
        if (dim < VALUE_DIM) o[(t * N_HEADS + h) * VALUE_DIM + dim] = acc[d] / l;
    }
}
