#version 450
// Embedding lookup: out[t] = W[tokens[t]] * scale, for the rows held by this weight chunk.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 32) in;
layout(binding = 2) writeonly buffer Y { float y[]; };

#define K pc.u[0]
#define ROW_FIRST pc.u[1]  // first table row in this chunk
#define ROW_COUNT pc.u[2]
#define SCALE pc_float(3)

void main() {
    uint t = gl_WorkGroupID.x;
    uint id = uint(meta_token(t));
    if (id < ROW_FIRST || id >= ROW_FIRST + ROW_COUNT) return;
    uint row = row_start(id - ROW_FIRST, K);
    for (uint u = gl_LocalInvocationID.x; u < K / 32u; u += 32u) {
        float w[32];
        decode_unit(row, u, w);
        for (uint i = 0u; i < 32u; i++) y[t * K + u * 32u + i] = w[i] * SCALE;
    }
#ifdef FLOAT_ROWS
    for (uint i = K / 32u * 32u + gl_LocalInvocationID.x; i < K; i += 32u) y[t * K + i] = element_at(row, i) * SCALE;
#endif
}
