// Store this pass's k and v rows into the layer's pages, at page * page_size + slot.
struct Params {
    k_width: u32,
    v_width: u32,
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let c = gid.x;
    let row = kv_row(t);
    if (c < p.k_width) {
        k_cache[row * p.k_width + c] = k[t * p.k_width + c];
    }
    if (c < p.v_width) {
        v_cache[row * p.v_width + c] = v[t * p.v_width + c];
    }
}
