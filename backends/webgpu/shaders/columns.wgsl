// y[row] = x[row, start:start + width]: one part of a fused projection.
struct Params {
    in_width: u32,
    start: u32,
    width: u32,
    rows_kind: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= n_rows(p.rows_kind) * p.width) {
        return;
    }
    y[e] = x[(e / p.width) * p.in_width + p.start + e % p.width];
}
