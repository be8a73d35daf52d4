// The 6-bit scale and minimum of sub-block j of a Q4_K/Q5_K super-block whose 12 scale bytes
// start at word `sw` (GGML's get_scale_min_k4).
fn scale_min_k4(sw: u32, j: u32) -> vec2<u32> {
    let sj = ubyte(w[sw + (j >> 2u)], j & 3u);
    if (j < 4u) {
        let m = ubyte(w[sw + ((j + 4u) >> 2u)], (j + 4u) & 3u);
        return vec2<u32>(sj & 63u, m & 63u);
    }
    let s4 = ubyte(w[sw + ((j + 4u) >> 2u)], (j + 4u) & 3u);
    let sm4 = ubyte(w[sw + ((j - 4u) >> 2u)], (j - 4u) & 3u);
    return vec2<u32>((s4 & 0xfu) | ((sm4 >> 6u) << 4u), (s4 >> 4u) | ((sj >> 6u) << 4u));
}
