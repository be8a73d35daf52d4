// Payload: qh (1 word: bit j is the fifth bit of weight j), then 16 bytes of nibbles; header f16 d.
fn load_sub(sb: u32, hdr: u32) {
    let d = half_at(hdr, sb);
    let base = sb * 5u;
    let qh = w[base];
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + 1u + i];
        for (var k = 0u; k < 4u; k++) {
            let b = ubyte(q, k);
            let j = 4u * i + k;
            let lo = (b & 0xfu) | (((qh >> j) & 1u) << 4u);
            let hi = (b >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
            wv[j] = d * (f32(lo) - 16.0);
            wv[j + 16u] = d * (f32(hi) - 16.0);
        }
    }
}
