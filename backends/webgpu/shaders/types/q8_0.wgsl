// 32 signed bytes (8 words); header: f16 d.
fn load_sub(sb: u32, hdr: u32) {
    let d = half_at(hdr, sb);
    let base = sb * 8u;
    for (var i = 0u; i < 8u; i++) {
        let q = w[base + i];
        for (var k = 0u; k < 4u; k++) {
            wv[4u * i + k] = d * sbyte(q, k);
        }
    }
}
