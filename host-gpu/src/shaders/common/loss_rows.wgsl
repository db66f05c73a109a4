// What the next-token and the masked cross-entropy (train_loss.wgsl, train_loss_masked.wgsl)
// share: their uniform, and the row maths of logits [rows][V] by one 64-thread workgroup per row
// (needs workgroup_sum.wgsl and the kernel's read-write `logits` and `scale` bindings).
// A dispatch covers the `rows` rows first, first + 1, … of the t·batch: the logits hold those
// rows only (local row r at r·V), the per-row lse and the per-target outputs are indexed by the
// global row first + r. The head runs its rows in such tiles (host-gpu/src/train/head.rs).
struct LossParams {
    t: u32,
    batch: u32,
    vocab: u32,
    first: u32,
    rows: u32,
}

// log Σ_v exp(logits[base + v]), from the row's maximum mx.
fn row_lse(base: u32, mx: f32, li: u32) -> f32 {
    var s = 0.0;
    for (var v = li; v < p.vocab; v += 64u) {
        s += exp(logits[base + v] - mx);
    }
    return mx + log(workgroup_sum(s, li));
}

// The backward of one row, in place: logits[base + v] becomes
// scale · (exp(logits[base + v] − l) − [v = tgt]), with l the row's log-sum-exp. Each element
// is read and written by the same thread only.
fn write_dlogits(base: u32, l: f32, tgt: u32, li: u32) {
    let s = scale[0];
    for (var v = li; v < p.vocab; v += 64u) {
        var d = exp(logits[base + v] - l);
        if (v == tgt) {
            d -= 1.0;
        }
        logits[base + v] = s * d;
    }
}
