// Cross-entropy against the next token, per row g = t·B + b (local row r = g − first of the
// dispatch's logits [rows][V], see loss_rows.wgsl):
//   forward:  lse[g] = log Σ_v exp(logits[r][v]); loss[b·T + t] = lse[g] − logits[r][target(g)]
//   backward: logits[r][v] becomes scale · (exp(logits[r][v] − lse[g]) − [v = target(g)])
// target(g) = tokens[b·(T+1) + t + 1]. One 64-thread workgroup per row.
@group(0) @binding(0) var<storage, read> tokens: array<u32>;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>; // backward: dlogits, in place
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read> scale: array<f32>;
@group(0) @binding(5) var<uniform> p: LossParams;

const WG: u32 = 64u;

fn target_of(g: u32) -> u32 {
    let t = g / p.batch;
    let b = g % p.batch;
    return tokens[b * (p.t + 1u) + t + 1u];
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
    var m = -3.0e38;
    for (var v = li; v < p.vocab; v += 64u) {
        m = max(m, logits[base + v]);
    }
    partial[li] = m;
    workgroupBarrier();
    for (var span = 32u; span > 0u; span >>= 1u) {
        if (li < span) {
            partial[li] = max(partial[li], partial[li + span]);
        }
        workgroupBarrier();
    }
    let mx = partial[0];
    workgroupBarrier();
    let l = row_lse(base, mx, li);
    if (li == 0u) {
        lse[g] = l;
        let tgt = min(target_of(g), p.vocab - 1u);
        loss[(g % p.batch) * p.t + g / p.batch] = l - logits[base + tgt];
    }
}

@compute @workgroup_size(64)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.rows) {
        return;
    }
    _ = loss[0]; // the forward's binding; keeps one layout for both entries
    let g = p.first + r;
    let l = lse[g];
    let tgt = min(target_of(g), p.vocab - 1u); // as the forward
    write_dlogits(r * p.vocab, l, tgt, li);
}
