// RMS of one row of the kernel's `x` binding, by the WG threads of a workgroup, and the
// normed row (needs workgroup_sum.wgsl).

// 1 / sqrt(mean_i x[base + i]² + eps) over the row's `cols` values.
fn inv_rms(base: u32, cols: u32, eps: f32, li: u32) -> f32 {
    var s = 0.0;
    for (var i = li; i < cols; i += WG) {
        let v = x[base + i];
        s += v * v;
    }
    return 1.0 / sqrt(workgroup_sum(s, li) / f32(cols) + eps);
}

// out[base + i] = x[base + i] · inv · w[wbase + i] over the row's `cols` values (needs the
// kernel's `w` and `out` bindings).
fn write_normed(base: u32, wbase: u32, cols: u32, inv: f32, li: u32) {
    for (var i = li; i < cols; i += WG) {
        out[base + i] = x[base + i] * inv * w[wbase + i];
    }
}
