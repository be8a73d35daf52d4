// y[t, row0 + n] = sum_k x[t, k] * W[n, k] (+ bias) for one chunk of W's rows, any weight type.
// A workgroup takes ROWS rows and TT tokens: each row's TPR threads walk its sub-blocks of 32,
// dequantize each once and use it for all TT tokens, so prefill reads the weights T/TT times.
struct Params {
    n_out: u32,
    k: u32,
    rows_kind: u32,
    row0: u32,
    n_rows: u32,
    has_bias: u32,
    hdr: u32,
    pad: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;  // k is a multiple of 32
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;

const TPR: u32 = 16u;
const ROWS: u32 = 4u;
const TT: u32 = 8u;
var<workgroup> partial: array<f32, 512>;  // [ROWS * TPR threads][TT]

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_tok = n_rows(p.rows_kind);
    let r_local = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * ROWS + r_local;
    let t0 = wg.y * TT;
    let tn = min(TT, n_tok - t0);
    let nsub = p.k / 32u;
    var acc: array<f32, 8>;
    for (var tt = 0u; tt < TT; tt++) {
        acc[tt] = 0.0;
    }
    if (row < p.n_rows) {
        for (var j = lane; j < nsub; j += TPR) {
            load_sub(row * nsub + j, p.hdr);
            for (var tt = 0u; tt < tn; tt++) {
                let xb = ((t0 + tt) * p.k + j * 32u) / 4u;
                var s = 0.0;
                for (var i = 0u; i < 8u; i++) {
                    s += dot(vec4<f32>(wv[4u * i], wv[4u * i + 1u], wv[4u * i + 2u], wv[4u * i + 3u]), x[xb + i]);
                }
                acc[tt] += s;
            }
        }
    }
    for (var tt = 0u; tt < TT; tt++) {
        partial[lid * TT + tt] = acc[tt];
    }
    workgroupBarrier();
    if (lid < ROWS * TT) {
        let rl = lid / TT;
        let tt = lid % TT;
        let r = wg.x * ROWS + rl;
        if (r < p.n_rows && tt < tn) {
            var s = 0.0;
            for (var l = 0u; l < TPR; l++) {
                s += partial[(rl * TPR + l) * TT + tt];
            }
            let n = p.row0 + r;
            if (p.has_bias != 0u) {
                s += bias[n];
            }
            y[(t0 + tt) * p.n_out + n] = s;
        }
    }
}
