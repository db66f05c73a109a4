// o += the inter-chunk levels each chunk reads, in level order (deterministic, no atomics), for
// the heads of one head group (olvl_row). One workgroup per (block of 256 (head, column) pairs
// of the group, chunk).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> olvl: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let x = wg.x * 256u + lid;
    let c = wg.y;
    if (x >= P.group_heads * P.dv) {
        return;
    }
    let h = P.head0 + x / P.dv;
    let d = x % P.dv;
    let n = min(CHUNK, P.t - c * CHUNK);
    for (var r = 0u; r < n; r++) {
        let t = c * CHUNK + r;
        let at = (t * P.heads + h) * P.dv + d;
        var s = o[at];
        for (var m = 0u; m < P.n_scans; m++) {
            let slot = olvl_slot(m, c);
            if (slot != NO_SLOT) {
                s += olvl[olvl_row(slot, r, h) + d];
            }
        }
        o[at] = s;
    }
}
