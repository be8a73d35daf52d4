// Super-block of 256 (52 words): 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed
// scale bytes; header f16 d. Sub-block j: half h = j/4, quarter q = j%4 (GGML's dequantize_row_q6_K).
fn load_sub(sb: u32, hdr: u32) {
    let blk = sb >> 3u;
    let j = sb & 7u;
    let h = j >> 2u;
    let q = j & 3u;
    let base = blk * 52u;
    let d = half_at(hdr, blk);
    let lw = base + (64u * h + (q & 1u) * 32u) / 4u;
    let hw = base + 32u + 8u * h;
    let lshift = (q >> 1u) * 4u;
    let hshift = 2u * q;
    let s0 = 8u * h + 2u * q;
    let sc0 = d * sbyte(w[base + 48u + (s0 >> 2u)], s0 & 3u);
    let sc1 = d * sbyte(w[base + 48u + ((s0 + 1u) >> 2u)], (s0 + 1u) & 3u);
    for (var i = 0u; i < 8u; i++) {
        let lo = w[lw + i];
        let hi = w[hw + i];
        let sc = select(sc0, sc1, i >= 4u);
        for (var k = 0u; k < 4u; k++) {
            let v = ((ubyte(lo, k) >> lshift) & 0xfu) | (((ubyte(hi, k) >> hshift) & 3u) << 4u);
            wv[4u * i + k] = sc * (f32(v) - 32.0);
        }
    }
}
