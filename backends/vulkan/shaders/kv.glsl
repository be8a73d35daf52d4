// One layer's KV cache: pages of PAGE_SIZE tokens, each page holding K [slot][K_WIDTH] then
// V [slot][V_WIDTH], stored as f32 or (KV_F16) f16.
#ifdef KV_F16
layout(binding = 3) buffer Kv { float16_t kv[]; };
#define KV_STORE(v) float16_t(v)
#else
layout(binding = 3) buffer Kv { float kv[]; };
#define KV_STORE(v) (v)
#endif
uint kv_key(uint page, uint slot, uint page_size, uint kw, uint vw) {
    return page * page_size * (kw + vw) + slot * kw;
}
uint kv_value(uint page, uint slot, uint page_size, uint kw, uint vw) {
    return page * page_size * (kw + vw) + page_size * kw + slot * vw;
}
