// rms_norm and rope, each over the rows of a pass.
#include "common.cuh"

// out = x / sqrt(mean(x^2) + eps) * (weight + weight_offset) over groups of `group` columns
// (group == width: whole rows). Launch: grid (width / group, n_rows), block 256.
extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ weight,
                                    float* __restrict__ out, int width, int group, float eps,
                                    float weight_offset) {
    __shared__ float partial[32];
    const long long base = (long long)blockIdx.y * width + (long long)blockIdx.x * group;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < group; c += blockDim.x) {
        const float v = x[base + c];
        ss += v * v;
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0) partial[0] = v;
    }
    __syncthreads();
    const float inv = rsqrtf(partial[0] / (float)group + eps);
    for (int c = threadIdx.x; c < group; c += blockDim.x) {
        const float w = weight ? weight[c] + weight_offset : 1.0f;
        out[base + c] = x[base + c] * inv * w;
    }
}

// Rotary embedding; one thread per output element. theta = pos * freq_scale * base^(-2i/n_rot),
// computed in double: positions reach tens of thousands of radians, where float loses the phase.
// normal: pairs (2i, 2i+1); neox: pairs (i, i + n_rot/2); dims >= n_rot pass through.
// Launch: grid ceil(n_tokens * n_heads * head_dim / 256), block 256.
extern "C" __global__ void rope(const float* __restrict__ x, float* __restrict__ out, const int* positions,
                                int n_tokens, int n_heads, int head_dim, int n_rot, int neox, float base,
                                float freq_scale) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n_tokens * n_heads * head_dim) return;
    const int d = (int)(idx % head_dim);
    const int t = (int)(idx / ((long long)n_heads * head_dim));
    const long long head = idx - d;
    if (d >= n_rot) {
        out[idx] = x[idx];
        return;
    }
    int i, first, second;
    if (neox) {
        const int half = n_rot / 2;
        i = d % half;
        first = i;
        second = i + half;
    } else {
        i = d / 2;
        first = 2 * i;
        second = 2 * i + 1;
    }
    const double theta = (double)positions[t] * (double)freq_scale * pow((double)base, -2.0 * i / n_rot);
    double s, c;
    sincos(theta, &s, &c);
    const double a = x[head + first], b = x[head + second];
    out[idx] = (float)(d == first ? a * c - b * s : a * s + b * c);
}
