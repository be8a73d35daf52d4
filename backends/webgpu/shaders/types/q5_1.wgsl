// As Q5_0, unsigned, with a minimum: header word = (f16 d, f16 m).
fn load_sub(sb: u32, hdr: u32) {
    let dm = unpack2x16float(w[hdr + sb]);
    let base = sb * 5u;
    let qh = w[base];
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + 1u + i];
        for (var k = 0u; k < 4u; k++) {
            let b = ubyte(q, k);
            let j = 4u * i + k;
            let lo = (b & 0xfu) | (((qh >> j) & 1u) << 4u);
            let hi = (b >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
            wv[j] = dm.x * f32(lo) + dm.y;
            wv[j + 16u] = dm.x * f32(hi) + dm.y;
        }
    }
}
