// y = x / sqrt(mean(x^2) + eps) * (weight + offset) over groups of `group` columns.
// A workgroup per (group, row).
struct Params {
    width: u32,
    group: u32,
    rows_kind: u32,
    has_weight: u32,
    eps: f32,
    offset: f32,
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> sums: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    if (wg.y >= n_rows(p.rows_kind)) {
        return;
    }
    let base = wg.y * p.width + wg.x * p.group;
    var s = 0.0;
    for (var c = lid; c < p.group; c += 64u) {
        let v = x[base + c];
        s += v * v;
    }
    sums[lid] = s;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            sums[lid] += sums[lid + stride];
        }
        workgroupBarrier();
    }
    let inv = inverseSqrt(sums[0] / f32(p.group) + p.eps);
    for (var c = lid; c < p.group; c += 64u) {
        var v = x[base + c] * inv;
        if (p.has_weight != 0u) {
            v *= weight[c] + p.offset;
        }
        y[base + c] = v;
    }
}
