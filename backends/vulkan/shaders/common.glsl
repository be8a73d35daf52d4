// Shared by every kernel: the push-constant words, the batch metadata buffer and small helpers.
// Each kernel names the words it reads with #defines; floats travel as their bit patterns.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable

layout(push_constant) uniform PushWords { uint u[16]; } pc;

float pc_float(uint i) { return uintBitsToFloat(pc.u[i]); }

// tanh as some drivers build it, (e^2z - 1) / (e^2z + 1), is NaN for large |z|; at |z| = 15 it
// is already +-1 in float32.
float safe_tanh(float z) { return tanh(clamp(z, -15.0, 15.0)); }
vec4 safe_tanh(vec4 z) { return tanh(clamp(z, -15.0, 15.0)); }

// Batch metadata, int32, at fixed offsets that depend only on the plan's max tokens per pass
// (TMAX): tokens, positions, sequence of each token, logit rows, kv length and page-table
// offset of each sequence, then the page tables. Word 15 always carries TMAX.
layout(binding = 7) readonly buffer Meta { int meta[]; };
#define TMAX pc.u[15]
int meta_token(uint t) { return meta[t]; }
int meta_position(uint t) { return meta[TMAX + t]; }
int meta_seq(uint t) { return meta[2u * TMAX + t]; }
int meta_row(uint r) { return meta[3u * TMAX + r]; }
int meta_kv_len(uint s) { return meta[4u * TMAX + s]; }
// Page holding position `pos` of sequence `s`.
uint meta_page(uint s, uint pos, uint page_size) {
    return uint(meta[6u * TMAX + uint(meta[5u * TMAX + s]) + pos / page_size]);
}
