// RMS of one row of the kernel's `x` binding, by the WG threads of a workgroup (needs
// workgroup_sum.wgsl).

// 1 / sqrt(mean_i x[base + i]² + eps) over the row's `cols` values.
fn inv_rms(base: u32, cols: u32, eps: f32, li: u32) -> f32 {
    var s = 0.0;
    for (var i = li; i < cols; i += WG) {
        let v = x[base + i];
        s += v * v;
    }
    return 1.0 / sqrt(workgroup_sum(s, li) / f32(cols) + eps);
}
