// Cross-entropy against explicit targets with an ignore marker, per row r = t·B + b of
// logits [rows][V]; targets and outputs are [B][T] (index b·T + t), target 0xFFFFFFFF = ignored:
//   forward:  lse[r] = log Σ_v exp(logits[r][v]); loss[b·T + t] = lse[r] − logits[r][tgt];
//             correct[b·T + t] = 1 when the first largest logit of the row is at tgt, else 0;
//             ignored rows: loss 0 and correct 0
//   backward: dlogits[r][v] = scale · (exp(logits[r][v] − lse[r]) − [v = tgt]); ignored rows 0
// Other targets ≥ V are clamped to V − 1, as the next-token loss does. One 64-thread workgroup
// per row.
@group(0) @binding(0) var<storage, read> targets: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // forward: loss; backward: dlogits
@group(0) @binding(4) var<storage, read> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> correct: array<f32>;
@group(0) @binding(6) var<uniform> p: LossParams;

const IGNORED: u32 = 0xFFFFFFFFu;

const WG: u32 = 64u;

var<workgroup> arg: array<u32, 64>;

// Index of row r's target in [B][T].
fn target_index(r: u32) -> u32 {
    return (r % p.batch) * p.t + r / p.batch;
}

@compute @workgroup_size(64)
fn forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.t * p.batch) {
        return;
    }
    _ = scale[0]; // the backward's binding; keeps one layout for both entries
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
        lse[r] = l;
        let i = target_index(r);
        let raw = targets[i];
        if (raw == IGNORED) {
            out[i] = 0.0;
            correct[i] = 0.0;
        } else {
            let tgt = min(raw, p.vocab - 1u);
            out[i] = l - logits[base + tgt];
            correct[i] = select(0.0, 1.0, best == tgt);
        }
    }
}

@compute @workgroup_size(64)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.t * p.batch) {
        return;
    }
    _ = correct[0]; // the forward's binding; keeps one layout for both entries
    let base = r * p.vocab;
    let raw = targets[target_index(r)];
    if (raw == IGNORED) {
        for (var v = li; v < p.vocab; v += 64u) {
            out[base + v] = 0.0;
        }
        return;
    }
    let l = lse[r];
    let tgt = min(raw, p.vocab - 1u);
    write_dlogits(base, l, tgt, li);
}
