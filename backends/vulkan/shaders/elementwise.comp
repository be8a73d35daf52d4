#version 450
// Element-wise ops over N values: add, mul, scale, softcap, silu_mul, gelu_mul.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 1) readonly buffer A { float a[]; };
layout(binding = 2) readonly buffer B { float b[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

#define N pc.u[0]
#define OP pc.u[1]
#define PARAM pc_float(2)

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= N) return;
    float v = a[i];
    if (OP == 0u) y[i] = v + b[i];
    else if (OP == 1u) y[i] = v * b[i];
    else if (OP == 2u) y[i] = v * PARAM;
    else if (OP == 3u) y[i] = PARAM * safe_tanh(v / PARAM);
    else if (OP == 4u) y[i] = v / (1.0 + exp(-v)) * b[i];
    else {
        float inner = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        y[i] = 0.5 * v * (1.0 + safe_tanh(inner)) * b[i];
    }
}
