#version 450
// y[t, row_offset + r] = dot(W[r], x[t]) (+ bias) (+ residual), for a tile of TILE tokens:
// weights are decoded once per tile, inputs read as vec4.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 3) readonly buffer Bias { float bias[]; };
layout(binding = 4) readonly buffer Residual { float residual[]; };
layout(binding = 5) readonly buffer Up { vec4 up4[]; };  // x = act(x) * up (flags 4, 8)

#define K pc.u[0]
#define N_TOKENS pc.u[1]
#define ROW_OFFSET pc.u[2]  // first output column of this weight chunk
#define Y_WIDTH pc.u[3]     // full output width (all chunks)
#define FLAGS pc.u[4]       // 1: add bias, 2: add residual, 4: x = silu(x) * up, 8: x = gelu(x) * up
#define ROW_BASE pc.u[5]    // first row of this dispatch within the chunk (dispatch-size limits)
#define CHUNK_ROWS pc.u[6]

const uint TILE = 8u;

vec4 load_x(uint i) {
    vec4 g = x4[i];
    if ((FLAGS & 4u) != 0u) return g / (1.0 + exp(-g)) * up4[i];
    if ((FLAGS & 8u) != 0u) {
        vec4 inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
        return 0.5 * g * (1.0 + safe_tanh(inner)) * up4[i];
    }
    return g;
}

// One workgroup of 32 invocations per (ROWS rows, TILE tokens): the invocations split each row's
// units, reuse every decoded unit for all tokens and every vec4 of inputs for all rows, then sum
// their partials in shared memory. (One invocation per row was tried for lavapipe: slower on
// Mesa 22 and for prefill on Mesa 25.)
layout(local_size_x = 32) in;
const uint ROWS = 4u;
shared float partial[ROWS * TILE * 32u];

void main() {
    uint r0 = ROW_BASE + gl_WorkGroupID.x * ROWS;
    uint nr = min(ROWS, CHUNK_ROWS - r0);
    uint t0 = gl_WorkGroupID.y * TILE;
    uint nt = min(TILE, N_TOKENS - t0);
    uint lid = gl_LocalInvocationID.x;
    float acc[ROWS * TILE];
    for (uint i = 0u; i < ROWS * TILE; i++) acc[i] = 0.0;
    for (uint u = lid; u < K / 32u; u += 32u) {
        float w[ROWS][32];
        for (uint j = 0u; j < nr; j++) decode_unit(row_start(r0 + j, K), u, w[j]);
        for (uint t = 0u; t < nt; t++) {
            uint xo = ((t0 + t) * K + u * 32u) / 4u;
            vec4 xv[8];
            for (uint i = 0u; i < 8u; i++) xv[i] = load_x(xo + i);
            for (uint j = 0u; j < nr; j++) {
                float s = 0.0;
                for (uint i = 0u; i < 8u; i++)
                    s += dot(vec4(w[j][4u * i], w[j][4u * i + 1u], w[j][4u * i + 2u], w[j][4u * i + 3u]), xv[i]);
                acc[j * TILE + t] += s;
            }
        }
    }
    for (uint i = 0u; i < ROWS * TILE; i++) partial[i * 32u + lid] = acc[i];
    barrier();
    if (lid < nr * TILE) {
        uint j = lid / TILE, t = lid % TILE;
        if (t < nt) {
            float s = 0.0;
            for (uint i = 0u; i < 32u; i++) s += partial[lid * 32u + i];
            uint col = ROW_OFFSET + r0 + j;
            uint o = (t0 + t) * Y_WIDTH + col;
            if ((FLAGS & 1u) != 0u) s += bias[col];
            if ((FLAGS & 2u) != 0u) s += residual[o];
            y[o] = s;
        }
    }
}
