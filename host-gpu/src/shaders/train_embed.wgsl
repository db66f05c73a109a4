// Embedding rows of a batch of token windows, rows in (t, b) order (token-major, batch-minor):
// row r = t·B + b reads token tokens[b·(T+1) + t] (the windows are [B][T+1]; the last token of a
// window is only a target).
//   forward:  x[r][d] = E[id(r)][d]
//   backward: dE[v][d] += Σ_{r : id(r) = v} dx[r][d]   (one thread per (v, d), no atomics)
struct EmbedParams {
    t: u32,
    batch: u32,
    d: u32,
    vocab: u32,
}

@group(0) @binding(0) var<storage, read> tokens: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<uniform> p: EmbedParams;

fn token_of(r: u32) -> u32 {
    let t = r / p.batch;
    let b = r % p.batch;
    return min(tokens[b * (p.t + 1u) + t], p.vocab - 1u);
}

@compute @workgroup_size(256)
fn forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    let rows = p.t * p.batch;
    if (i >= rows * p.d) {
        return;
    }
    let r = i / p.d;
    let c = i % p.d;
    dst[i] = src[token_of(r) * p.d + c];
}

@compute @workgroup_size(256)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.vocab * p.d) {
        return;
    }
    let v = i / p.d;
    let c = i % p.d;
    let rows = p.t * p.batch;
    var s = 0.0;
    for (var r = 0u; r < rows; r++) {
        if (token_of(r) == v) {
            s += src[r * p.d + c];
        }
    }
    dst[i] = dst[i] + s;
}
