// Helpers shared by every weight type. `w` is the weight chunk as u32 words; `wv` receives one
// sub-block of 32 dequantized weights.
var<private> wv: array<f32, 32>;

fn sbyte(word: u32, k: u32) -> f32 {
    return f32(bitcast<i32>(word << (24u - 8u * k)) >> 24u);
}

fn ubyte(word: u32, k: u32) -> u32 {
    return (word >> (8u * k)) & 0xffu;
}

// The f16 header of block b, two per word after the payloads.
fn half_at(hdr: u32, b: u32) -> f32 {
    let v = unpack2x16float(w[hdr + (b >> 1u)]);
    return select(v.x, v.y, (b & 1u) == 1u);
}
