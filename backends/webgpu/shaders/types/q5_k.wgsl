// Super-block of 256 (44 words): (f16 d, f16 dmin), 12 scale bytes, 32 bytes of high bits
// (bit j of byte l is the fifth bit of weight l of sub-block j), 128 bytes of nibbles.
fn load_sub(sb: u32, hdr: u32) {
    let blk = sb >> 3u;
    let j = sb & 7u;
    let base = blk * 44u;
    let dd = unpack2x16float(w[base]);
    let sm = scale_min_k4(base + 1u, j);
    let d1 = dd.x * f32(sm.x);
    let m1 = dd.y * f32(sm.y);
    let shift = (j & 1u) * 4u;
    let qw = base + 12u + (j >> 1u) * 8u;
    for (var i = 0u; i < 8u; i++) {
        let q = w[qw + i];
        let h = w[base + 4u + i];
        for (var k = 0u; k < 4u; k++) {
            let hi = ((ubyte(h, k) >> j) & 1u) << 4u;
            wv[4u * i + k] = d1 * f32(((ubyte(q, k) >> shift) & 0xfu) | hi) - m1;
        }
    }
}
