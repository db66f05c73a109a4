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
    // The backward's block of dE per workgroup (the forward ignores them).
    ids_per_group: u32,
    cols_per_group: u32,
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
var<workgroup> ids_hit: array<u32, 256>;
// The workgroup's block of dE: ids_per_group ids × cols_per_group columns (at most
// ACC_FLOATS; `EmbedShape` picks the block).
const ACC_FLOATS: u32 = 2048u;
var<workgroup> acc: array<f32, ACC_FLOATS>;

// One workgroup per block of dE: ids [v0, v0 + ids_per_group) × columns [c0, c0 +
// cols_per_group). Blocks of 256 rows are scanned for ids in the block's range, the hits
// listed in row order (a workgroup prefix sum of the match flags), and their dx columns added
// into the block in workgroup memory in that order; the block is added to dE at the end.
// O(V/ids_per_group · rows) id compares, not O(V·D·rows); deterministic (no atomics, a fixed
// order). Several ids per workgroup keep a large vocabulary from rescanning the rows once per
// id.
@compute @workgroup_size(256)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let g = wg.y * nw.x + wg.x;
    let col_groups = (p.d + p.cols_per_group - 1u) / p.cols_per_group;
    let v0 = (g / col_groups) * p.ids_per_group;
    if (v0 >= p.vocab) {
        return; // uniform across the workgroup
    }
    let c0 = (g % col_groups) * p.cols_per_group;
    let ids = min(p.ids_per_group, p.vocab - v0);
    let cols = min(p.cols_per_group, p.d - c0);
    for (var i = li; i < ids * cols; i += 256u) {
        acc[i] = 0.0;
    }
    let rows = p.t * p.batch;
    for (var r0 = 0u; r0 < rows; r0 += 256u) {
        let r = r0 + li;
        var hit = 0u;
        var id = 0u;
        if (r < rows) {
            id = token_of(r);
            if (id >= v0 && id < v0 + ids) {
                hit = 1u;
            }
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
            ids_hit[flags[li] - 1u] = id - v0;
        }
        let count = workgroupUniformLoad(&flags[255]);
        // (workgroupUniformLoad is also the barrier that publishes rows_hit and ids_hit.)
        // A column belongs to one thread, so each acc entry is added to in row order.
        for (var c = li; c < cols; c += 256u) {
            for (var j = 0u; j < count; j++) {
                acc[ids_hit[j] * cols + c] += src[rows_hit[j] * p.d + c0 + c];
            }
        }
        workgroupBarrier();
    }
    for (var i = li; i < ids * cols; i += 256u) {
        let o = (v0 + i / cols) * p.d + c0 + i % cols;
        dst[o] = dst[o] + acc[i];
    }
}
