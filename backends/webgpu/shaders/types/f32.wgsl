fn load_sub(sb: u32, hdr: u32) {
    let base = sb * 32u;
    for (var i = 0u; i < 32u; i++) {
        wv[i] = bitcast<f32>(w[base + i]);
    }
}
