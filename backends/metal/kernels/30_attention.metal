// The KV cache: kv_write into the engine's pages, and causal grouped-query attention over them.
// Pages are f32 (the Metal backend offers f32 KV only).

kernel void kv_write(device const float* k [[buffer(0)]], device const float* v [[buffer(1)]],
                     device float* pages [[buffer(2)]], device const int* positions [[buffer(3)]],
                     device const int* seq_index [[buffer(4)]], device const int* page_tables [[buffer(5)]],
                     constant PageParams& p [[buffer(6)]], uint t [[threadgroup_position_in_grid]],
                     uint tid [[thread_position_in_threadgroup]], uint nt [[threads_per_threadgroup]]) {
    int pos = positions[t];
    int page = page_tables[seq_index[t] * p.pt_stride + pos / p.page_size], slot = pos % p.page_size;
    for (int c = tid; c < p.kw + p.vw; c += nt) {
        if (c < p.kw) pages[kv_index(page, p.layer, 0, slot, c, p.page_size, p.kw, p.vw, p.n_layers)] = k[long(t) * p.kw + c];
        else pages[kv_index(page, p.layer, 1, slot, c - p.kw, p.page_size, p.kw, p.vw, p.n_layers)] = v[long(t) * p.vw + c - p.kw];
    }
}

struct AttnParams { int n_heads; int n_kv_heads; int dk; int dv; float scale; float softcap; int window; };

// One simdgroup per (head, token): lanes own head dims lane + 32i, keys are walked with an online
// softmax. Dispatch: threadgroups (n_heads, T) of 32.
kernel void attention(device const float* q [[buffer(0)]], device const float* pages [[buffer(1)]],
                      device const int* positions [[buffer(2)]], device const int* seq_index [[buffer(3)]],
                      device const int* page_tables [[buffer(4)]], device const int* kv_lens [[buffer(5)]],
                      device float* out [[buffer(6)]], constant PageParams& pp [[buffer(7)]],
                      constant AttnParams& p [[buffer(8)]], uint2 tg [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]]) {
    int h = tg.x, t = tg.y, kvh = h / (p.n_heads / p.n_kv_heads);
    int seq = seq_index[t], pos = positions[t];
    int end = min(pos + 1, kv_lens[seq]), start = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    float qr[8], acc[8];
    device const float* qh = q + long(t) * p.n_heads * p.dk + h * p.dk;
    for (int i = 0; i < 8; i++) { int d = lane + 32 * i; qr[i] = d < p.dk ? qh[d] : 0.0f; acc[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int j = start; j < end; j++) {
        int page = page_tables[seq * pp.pt_stride + j / pp.page_size], slot = j % pp.page_size;
        device const float* kp = pages + kv_index(page, pp.layer, 0, slot, kvh * p.dk, pp.page_size, pp.kw, pp.vw, pp.n_layers);
        device const float* vp = pages + kv_index(page, pp.layer, 1, slot, kvh * p.dv, pp.page_size, pp.kw, pp.vw, pp.n_layers);
        float dot = 0.0f;
        for (int i = 0; i < 8; i++) { int d = lane + 32 * i; if (d < p.dk) dot += qr[i] * kp[d]; }
        float s = simd_sum(dot) * p.scale;
        if (p.softcap > 0.0f) s = p.softcap * precise::tanh(s / p.softcap);
        float m_new = max(m, s), corr = exp(m - m_new), e = exp(s - m_new);
        l = l * corr + e;
        for (int i = 0; i < 8; i++) { int d = lane + 32 * i; acc[i] = acc[i] * corr + (d < p.dv ? e * vp[d] : 0.0f); }
        m = m_new;
    }
    device float* oh = out + long(t) * p.n_heads * p.dv + h * p.dv;
    for (int i = 0; i < 8; i++) { int d = lane + 32 * i; if (d < p.dv) oh[d] = acc[i] / l; }
}
