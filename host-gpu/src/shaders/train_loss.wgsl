// Cross-entropy against the next token, per row r = t·B + b of logits [rows][V]:
//   forward:  lse[r] = log Σ_v exp(logits[r][v]); loss[b·T + t] = lse[r] − logits[r][target(r)]
//   backward: dlogits[r][v] = scale · (exp(logits[r][v] − lse[r]) − [v = target(r)])
// target(r) = tokens[b·(T+1) + t + 1]. One 64-thread workgroup per row.
@group(0) @binding(0) var<storage, read> tokens: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // forward: loss; backward: dlogits
@group(0) @binding(4) var<storage, read> scale: array<f32>;
@group(0) @binding(5) var<uniform> p: LossParams;

const WG: u32 = 64u;

fn target_of(r: u32) -> u32 {
    let t = r / p.batch;
    let b = r % p.batch;
    return tokens[b * (p.t + 1u) + t + 1u];
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
        lse[r] = l;
        let tgt = min(target_of(r), p.vocab - 1u);
        out[(r % p.batch) * p.t + r / p.batch] = l - logits[base + tgt];
    }
}

@compute @workgroup_size(64)
fn backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.t * p.batch) {
        return;
    }
    let base = r * p.vocab;
    let l = lse[r];
    let tgt = min(target_of(r), p.vocab - 1u); // as the forward
    write_dlogits(base, l, tgt, li);
}
