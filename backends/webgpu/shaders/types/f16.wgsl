fn load_sub(sb: u32, hdr: u32) {
    let base = sb * 16u;
    for (var i = 0u; i < 16u; i++) {
        let v = unpack2x16float(w[base + i]);
        wv[2u * i] = v.x;
        wv[2u * i + 1u] = v.y;
    }
}
