// Causal attention over paged K/V with grouped heads: a workgroup per (head, token). Keys are
// taken 64 at a time (a thread per key), with an online softmax; each thread owns value
// dimensions lid, lid + 64, ... (value_dim <= 256).
struct Params {
    n_heads: u32,
    group: u32,       // query heads per kv head
    key_dim: u32,
    value_dim: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    page_size: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read> v_cache: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> qs: array<f32, 256>;
var<workgroup> scores: array<f32, 64>;
var<workgroup> rows: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let kvh = h / p.group;
    let k_width = (p.n_heads / p.group) * p.key_dim;
    let v_width = (p.n_heads / p.group) * p.value_dim;
    let pos = position(t);
    let s = seq_of(t);
    for (var d = lid; d < p.key_dim; d += 64u) {
        qs[d] = q[(t * p.n_heads + h) * p.key_dim + d];
    }
    var start = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        start = pos + 1u - p.window;
    }
    workgroupBarrier();
    var m = -3.0e38;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var base = start; base <= pos; base += 64u) {
        let j = base + lid;
        var score = -3.0e38;
        if (j <= pos) {
            let row = page_of(s, j / p.page_size) * p.page_size + j % p.page_size;
            rows[lid] = row;
            let kb = row * k_width + kvh * p.key_dim;
            var dot = 0.0;
            for (var d = 0u; d < p.key_dim; d++) {
                dot += qs[d] * k_cache[kb + d];
            }
            score = dot * p.scale;
            if (p.softcap > 0.0) {
                score = p.softcap * safe_tanh(score / p.softcap);
            }
        }
        scores[lid] = score;
        workgroupBarrier();
        let n = min(64u, pos + 1u - base);
        var mx = m;
        for (var i = 0u; i < n; i++) {
            mx = max(mx, scores[i]);
        }
        let corr = exp(m - mx);
        l *= corr;
        for (var e = 0u; e < 4u; e++) {
            acc[e] *= corr;
        }
        for (var i = 0u; i < n; i++) {
            let pr = exp(scores[i] - mx);
            l += pr;
            let vb = rows[i] * v_width + kvh * p.value_dim;
            for (var e = 0u; e < 4u; e++) {
                let d = lid + 64u * e;
                if (d < p.value_dim) {
                    acc[e] += pr * v_cache[vb + d];
                }
            }
        }
        m = mx;
        workgroupBarrier();
    }
    for (var e = 0u; e < 4u; e++) {
        let d = lid + 64u * e;
        if (d < p.value_dim) {
            y[(t * p.n_heads + h) * p.value_dim + d] = acc[e] / l;
        }
    }
}
