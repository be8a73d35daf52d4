#version 450
// Store each token's K and V in its sequence's page at slot position % page_size.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
layout(binding = 1) readonly buffer Kin { float k_in[]; };
layout(binding = 2) readonly buffer Vin { float v_in[]; };

#define N_TOKENS pc.u[0]
#define K_WIDTH pc.u[1]
#define V_WIDTH pc.u[2]
#define PAGE_SIZE pc.u[3]

void main() {
    uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    uint width = K_WIDTH + V_WIDTH;
    if (id >= N_TOKENS * width) return;
    uint t = id / width, e = id % width;
    uint pos = uint(meta_position(t));
    uint page = meta_page(uint(meta_seq(t)), pos, PAGE_SIZE), slot = pos % PAGE_SIZE;
    if (e < K_WIDTH) kv[kv_key(page, slot, PAGE_SIZE, K_WIDTH, V_WIDTH) + e] = KV_STORE(k_in[t * K_WIDTH + e]);
    else kv[kv_value(page, slot, PAGE_SIZE, K_WIDTH, V_WIDTH) + e - K_WIDTH] = KV_STORE(v_in[t * V_WIDTH + e - K_WIDTH]);
}
