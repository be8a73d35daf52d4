// out = op(a, b) element by element: 0 add, 1 mul, 2 scale, 3 silu_mul, 4 gelu_mul, 5 softcap,
// 6 select_rows (copy row logit_rows[r] of a).
struct Params {
    op: u32,
    width: u32,
    rows_kind: u32,
    factor: f32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= n_rows(p.rows_kind) * p.width) {
        return;
    }
    let u = a[e];
    switch p.op {
        case 0u: { y[e] = u + b[e]; }
        case 1u: { y[e] = u * b[e]; }
        case 2u: { y[e] = u * p.factor; }
        case 3u: { y[e] = u / (1.0 + exp(-u)) * b[e]; }
        case 4u: {
            let g = 0.5 * u * (1.0 + safe_tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
            y[e] = g * b[e];
        }
        case 5u: { y[e] = p.factor * safe_tanh(u / p.factor); }
        default: {
            let r = e / p.width;
            y[e] = a[logit_row(r) * p.width + e % p.width];
        }
    }
}
