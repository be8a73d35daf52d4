#version 450
// y = x / sqrt(mean(x^2) + eps) * (weight + offset) over groups of GROUP columns; one workgroup
// per (token, group).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 3) readonly buffer Wt { float weight[]; };

#define WIDTH pc.u[0]
#define GROUP pc.u[1]
#define EPS pc_float(2)
#define OFFSET pc_float(3)
#define HAS_WEIGHT pc.u[4]

shared float sums[64];

void main() {
    uint t = gl_WorkGroupID.x, g = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
    uint base = t * WIDTH + g * GROUP;
    float s = 0.0;
    for (uint i = lid; i < GROUP; i += 64u) { float v = x[base + i]; s += v * v; }
    sums[lid] = s;
    barrier();
    for (uint stride = 32u; stride > 0u; stride >>= 1) {
        if (lid < stride) sums[lid] += sums[lid + stride];
        barrier();
    }
    float inv = inversesqrt(sums[0] / float(GROUP) + EPS);
    for (uint i = lid; i < GROUP; i += 64u) {
        float v = x[base + i] * inv;
        if (HAS_WEIGHT != 0u) v *= weight[i] + OFFSET;  // one weight per group column, shared by the groups
        y[base + i] = v;
    }
}
