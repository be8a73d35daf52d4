// Rotary embedding, a thread per element; cos/sin come from the pass table (computed in float64).
struct Params {
    width: u32,
    head_dim: u32,
    n_rot: u32,
    neox: u32,
    table: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= n_rows(0u) * p.width) {
        return;
    }
    let t = e / p.width;
    let c = e % p.width;
    let d = c % p.head_dim;
    let head = e - d;
    if (d >= p.n_rot) {
        y[e] = x[e];
        return;
    }
    let half = p.n_rot / 2u;
    var i: u32;
    var a: f32;
    var b: f32;
    var first: bool;
    if (p.neox != 0u) {
        i = d % half;
        a = x[head + i];
        b = x[head + i + half];
        first = d < half;
    } else {
        i = d / 2u;
        a = x[head + 2u * i];
        b = x[head + 2u * i + 1u];
        first = (d & 1u) == 0u;
    }
    let cs = rope_cs(p.table, t, i, half);
    y[e] = select(a * cs.y + b * cs.x, a * cs.x - b * cs.y, first);
}
