#version 450
// Rotary embedding. Thread i of a head rotates pair i (i < n_rot/2) or copies dims 2i, 2i+1.
// With ROPE_TABLE (the rope_table op) pair i turns by position * freqs[i], scaled by MSCALE.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
#ifdef ROPE_TABLE
layout(binding = 3) readonly buffer F { float freqs[]; };
#define MSCALE pc_float(5)
#else
#define BASE pc_float(5)
#define FREQ_SCALE pc_float(6)
#endif

#define N_TOKENS pc.u[0]
#define N_HEADS pc.u[1]
#define HEAD_DIM pc.u[2]
#define N_ROT pc.u[3]
#define NEOX pc.u[4]

void main() {
    uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    uint half_dim = HEAD_DIM / 2u;
    if (id >= N_TOKENS * N_HEADS * half_dim) return;
    uint i = id % half_dim, th = id / half_dim, t = th / N_HEADS;
    uint base = th * HEAD_DIM;
    if (i >= N_ROT / 2u) {
        y[base + 2u * i] = x[base + 2u * i];
        y[base + 2u * i + 1u] = x[base + 2u * i + 1u];
        return;
    }
#ifdef ROPE_TABLE
    float theta = float(meta_position(t)) * freqs[i];
    float c = MSCALE * cos(theta), s = MSCALE * sin(theta);
#else
    float theta = float(meta_position(t)) * FREQ_SCALE * pow(BASE, -2.0 * float(i) / float(N_ROT));
    float c = cos(theta), s = sin(theta);
#endif
    uint ia = NEOX != 0u ? base + i : base + 2u * i;
    uint ib = NEOX != 0u ? base + i + N_ROT / 2u : base + 2u * i + 1u;
    float a = x[ia], b = x[ib];
    y[ia] = a * c - b * s;
    y[ib] = a * s + b * c;
}
