// 16 bytes of nibbles (4 words): low nibble of byte j is weight j, high nibble weight j+16.
fn load_sub(sb: u32, hdr: u32) {
    let d = half_at(hdr, sb);
    let base = sb * 4u;
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + i];
        for (var k = 0u; k < 4u; k++) {
            let b = ubyte(q, k);
            let j = 4u * i + k;
            wv[j] = d * (f32(b & 0xfu) - 8.0);
            wv[j + 16u] = d * (f32(b >> 4u) - 8.0);
        }
    }
}
