// Tree sum over a workgroup of WG threads (a power of two the kernel declares), in a fixed
// order, so results are deterministic. Call it from uniform control flow; `partial` may be
// written again only after a further barrier (every thread reads partial[0] on return).
var<workgroup> partial: array<f32, WG>;

fn workgroup_sum(x: f32, li: u32) -> f32 {
    partial[li] = x;
    workgroupBarrier();
    for (var span = WG / 2u; span > 0u; span >>= 1u) {
        if (li < span) {
            partial[li] += partial[li + span];
        }
        workgroupBarrier();
    }
    return partial[0];
}
