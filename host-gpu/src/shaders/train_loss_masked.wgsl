// Cross-entropy against explicit targets with an ignore marker, per row g = t·B + b (local row
// r = g − first of the dispatch's logits [rows][V], see loss_rows.wgsl); targets and outputs are
// [B][T] (index b·T + t), target 0xFFFFFFFF = ignored:
//   forward:  lse[g] = log Σ_v exp(logits[r][v]); loss[b·T + t] = lse[g] − logits[r][tgt];
//             correct[b·T + t] = 1 when the first largest logit of the row is at tgt, else 0;
//             ignored rows: loss 0 and correct 0
//   backward: logits[r][v] becomes scale · (exp(logits[r][v] − lse[g]) − [v = tgt]); ignored
//             rows 0
// Other targets ≥ V are clamped to V − 1, as the next-token loss does. One 64-thread workgroup
// per row.
@group(0) @binding(0) var<storage, read> targets: array<u32>;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>; // backward: dlogits, in place
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> correct: array<f32>;
@group(0) @binding(6) var<uniform> p: LossParams;

const WG: u32 = 64u;

var<workgroup> arg: array<u32, 64>;

// Index of row g's target in [B][T].
fn target_index(g: u32) -> u32 {
    return (g % p.batch) * p.t + g / p.batch;
}

@compute @workgroup_size(64)
fn forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.rows) {
        return;
    }
    _ = scale[0]; // the backward's binding; keeps one layout for both entries
    let g = p.first + r;
    let base = r * p.vocab;
    // Maximum and its first index: each thread scans v = li, li + 64, … (the first strict
    // maximum is its earliest); the tree keeps the smaller index on ties.
    var m = -3.0e38;
    var at = 0u;
    for (var v = li; v < p.vocab; v += 64u) {
        let x = logits[base + v];
        if (x > m) {
            m = x;
            at = v;
        }
    }
    partial[li] = m;
    arg[li] = at;
    workgroupBarrier();
    for (var span = 32u; span > 0u; span >>= 1u) {
        if (li < span) {
            let o = partial[li + span];
            let oi = arg[li + span];
            if (o > partial[li] || (o == partial[li] && oi < arg[li])) {
                partial[li] = o;
                arg[li] = oi;
            }
        }
        workgroupBarrier();
    }
    let mx = partial[0];
    let best = arg[0];
    workgroupBarrier();
    let l = row_lse(base, mx, li);
    if (li == 0u) {
        lse[g] = l;
        let i = target_index(g);
        let raw = targets[i];
        if (raw == IGNORED) {
            loss[i] = 0.0;
            correct[i] = 0.0;
        } else {
            let tgt = min(raw, p.vocab - 1u);
            loss[i] = l - logits[base + tgt];
            correct[i] = select(0.0, 1.0, best == tgt);
        }
    }
}

@compute @workgroup_size(64)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.rows) {
        return;
    }
    // The forward's bindings; keep one layout for both entries.
    _ = loss[0];
    _ = correct[0];
    let g = p.first + r;
    let base = r * p.vocab;
    let raw = targets[target_index(g)];
    if (raw == IGNORED) {
        for (var v = li; v < p.vocab; v += 64u) {
            logits[base + v] = 0.0;
        }
        return;
    }
    let l = lse[g];
    let tgt = min(raw, p.vocab - 1u);
    write_dlogits(base, l, tgt, li);
}
