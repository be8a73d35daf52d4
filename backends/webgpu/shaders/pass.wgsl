// The per-pass table, written once per pass before the single submit. Word 0: tokens T;
// word 1: logit rows R; words 2..9: offsets of the arrays below; word 10 + k: offset of rope
// table k (cos, sin pairs as f32 bits, [T, n_rot / 2]).
@group(0) @binding(0) var<storage, read> pass_: array<u32>;

fn n_rows(kind: u32) -> u32 { return pass_[kind]; }            // kind 0: tokens, 1: logit rows
fn token_id(t: u32) -> u32 { return pass_[pass_[2] + t]; }
fn position(t: u32) -> u32 { return pass_[pass_[3] + t]; }
fn seq_of(t: u32) -> u32 { return pass_[pass_[4] + t]; }
fn kv_row(t: u32) -> u32 { return pass_[pass_[5] + t]; }     // page * page_size + slot
fn logit_row(r: u32) -> u32 { return pass_[pass_[6] + r]; }
fn page_of(s: u32, i: u32) -> u32 { return pass_[pass_[8] + pass_[pass_[7] + s] + i]; }
fn rope_cs(k: u32, t: u32, i: u32, half: u32) -> vec2<f32> {
    let at = pass_[10u + k] + 2u * (t * half + i);
    return vec2<f32>(bitcast<f32>(pass_[at]), bitcast<f32>(pass_[at + 1u]));
}

// tanh that stays finite for large |x| on every driver.
fn safe_tanh(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}
