// The head on scored rows only (GraphOptions::head_rows): the compaction of the rows whose
// target is not ignored into at most `cap` slots, in increasing row order (deterministic).
// Rows r are in (t, b) order; row r's target is at (r % B)·T + r / B of targets [B][T].
// One 256-thread workgroup: thread i owns the contiguous rows [i·chunk, (i + 1)·chunk), counts
// its scored rows, and a workgroup prefix sum over the counts gives its first slot.
//   slot_row[s]    row of slot s; IGNORED for unused slots
//   slot_target[s] that row's target; IGNORED for unused slots (the loss then skips the slot)
//   row_slot[r]    slot of row r; IGNORED for rows without a target, DROPPED for scored rows
//                  beyond the capacity (their outputs become NaN: an overflow is visible)
struct CompactParams {
    n: u32,
    batch: u32,
    t: u32,
    cap: u32,
}

@group(0) @binding(0) var<storage, read> targets: array<u32>;
@group(0) @binding(1) var<storage, read_write> slot_row: array<u32>;
@group(0) @binding(2) var<storage, read_write> slot_target: array<u32>;
@group(0) @binding(3) var<storage, read_write> row_slot: array<u32>;
@group(0) @binding(4) var<uniform> p: CompactParams;

const DROPPED: u32 = 0xFFFFFFFEu;

var<workgroup> sums: array<u32, 256>;

fn target_of(r: u32) -> u32 {
    return targets[(r % p.batch) * p.t + r / p.batch];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {
    let chunk = (p.n + 255u) / 256u;
    let lo = min(li * chunk, p.n);
    let hi = min(lo + chunk, p.n);
    var count = 0u;
    for (var r = lo; r < hi; r += 1u) {
        if (target_of(r) != IGNORED) {
            count += 1u;
        }
    }
    sums[li] = count;
    workgroupBarrier();
    // Inclusive prefix sum (Hillis–Steele).
    for (var span = 1u; span < 256u; span <<= 1u) {
        var below = 0u;
        if (li >= span) {
            below = sums[li - span];
        }
        workgroupBarrier();
        sums[li] += below;
        workgroupBarrier();
    }
    let total = sums[255];
    var slot = sums[li] - count;
    for (var r = lo; r < hi; r += 1u) {
        let tgt = target_of(r);
        if (tgt == IGNORED) {
            row_slot[r] = IGNORED;
        } else {
            if (slot < p.cap) {
                row_slot[r] = slot;
                slot_row[slot] = r;
                slot_target[slot] = tgt;
            } else {
                row_slot[r] = DROPPED;
            }
            slot += 1u;
        }
    }
    for (var s = total + li; s < p.cap; s += 256u) {
        slot_row[s] = IGNORED;
        slot_target[s] = IGNORED;
    }
}
