// As Q4_0, unsigned, with a minimum: header word = (f16 d, f16 m).
fn load_sub(sb: u32, hdr: u32) {
    let dm = unpack2x16float(w[hdr + sb]);
    let base = sb * 4u;
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + i];
        for (var k = 0u; k < 4u; k++) {
            let b = ubyte(q, k);
            let j = 4u * i + k;
            wv[j] = dm.x * f32(b & 0xfu) + dm.y;
            wv[j + 16u] = dm.x * f32(b >> 4u) + dm.y;
        }
    }
}
