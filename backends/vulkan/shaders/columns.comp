#version 450
// y[t] = x[t, START:START + WIDTH]: one part of a fused projection.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

#define N_ROWS pc.u[0]
#define IN_WIDTH pc.u[1]
#define START pc.u[2]
#define WIDTH pc.u[3]

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (i >= N_ROWS * WIDTH) return;
    uint r = i / WIDTH, e = i % WIDTH;
    y[i] = x[r * IN_WIDTH + START + e];
}
