// y[t] = row tokens[t] of the table (one chunk of it) times scale; a thread per sub-block of 32.
struct Params {
    width: u32,
    row0: u32,
    n_rows: u32,
    hdr: u32,
    scale: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let j = gid.x;
    let nsub = (p.width + 31u) / 32u;  // float tables are zero-padded to whole sub-blocks
    let id = token_id(t);
    if (j >= nsub || id < p.row0 || id >= p.row0 + p.n_rows) {
        return;
    }
    load_sub((id - p.row0) * nsub + j, p.hdr);
    let n = min(32u, p.width - j * 32u);
    for (var i = 0u; i < n; i++) {
        y[t * p.width + j * 32u + i] = wv[i] * p.scale;
    }
}
