// Embedding rows of a batch of token windows, rows in (t, b) order (token-major, batch-minor):
// row r = t·B + b reads token tokens[b·(T+1) + t] (the windows are [B][T+1]; the last token of a
// window is only a target).
//   forward:  x[r][d] = E[id(r)][d]
//   backward: dE[v][d] += Σ_{r : id(r) = v} dx[r][d]   (no atomics; see `backward`)
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

var<workgroup> flags: array<u32, 256>;
var<workgroup> rows_hit: array<u32, 256>;

// One workgroup per vocabulary row v: blocks of 256 rows are scanned for id(r) = v, the hits
// listed in row order (a workgroup prefix sum of the match flags), and their dx rows added to
// dE[v] in that order. O(V·rows) id compares, not O(V·D·rows); deterministic.
@compute @workgroup_size(256)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let v = wg.y * nw.x + wg.x;
    if (v >= p.vocab) {
        return; // uniform across the workgroup
    }
    let rows = p.t * p.batch;
    for (var r0 = 0u; r0 < rows; r0 += 256u) {
        let r = r0 + li;
        var hit = 0u;
        if (r < rows && token_of(r) == v) {
            hit = 1u;
        }
        flags[li] = hit;
        workgroupBarrier();
        // Inclusive prefix sum (Hillis–Steele).
        for (var span = 1u; span < 256u; span <<= 1u) {
            var add = 0u;
            if (li >= span) {
                add = flags[li - span];
            }
            workgroupBarrier();
            flags[li] += add;
            workgroupBarrier();
        }
        if (hit == 1u) {
            rows_hit[flags[li] - 1u] = r;
        }
        let count = workgroupUniformLoad(&flags[255]);
        // (workgroupUniformLoad is also the barrier that publishes rows_hit.)
        for (var c = li; c < p.d; c += 256u) {
            var s = 0.0;
            for (var j = 0u; j < count; j++) {
                s += src[rows_hit[j] * p.d + c];
            }
            if (count > 0u) {
                dst[v * p.d + c] = dst[v * p.d + c] + s;
            }
        }
        workgroupBarrier();
    }
}
