//! The reference integer kernels: plain Rust for every target. The per-architecture kernels
//! are checked against these, bit for bit.
//!
//! Each block's integer dot is exact (|Σ| ≤ 32 · 128 · 127 < 2^20); the float result of a
//! row is `Σ_b (d_w · d_x) · isum_b`, accumulated over the blocks in order, starting from 0.
//! Every path must keep exactly this float order.

use super::{ActBlock, BlockQ4_0, BlockQ8_0, QK};

/// Σ w·q over one Q8_0 block.
#[inline]
pub fn block_dot_q8_0(w: &BlockQ8_0, a: &ActBlock) -> i32 {
    w.qs.iter()
        .zip(&a.qs)
        .map(|(&x, &y)| x as i32 * y as i32)
        .sum()
}

/// Σ (w − 8)·q over one Q4_0 block.
#[inline]
pub fn block_dot_q4_0(w: &BlockQ4_0, a: &ActBlock) -> i32 {
    let (lo, hi) = a.qs.split_at(QK / 2);
    let mut s = 0i32;
    for ((&b, &x), &y) in w.qs.iter().zip(lo).zip(hi) {
        s += (b & 0x0F) as i32 * x as i32 + (b >> 4) as i32 * y as i32;
    }
    s - 8 * a.sum
}

/// The float combination every path shares: one row's blocks in order.
#[inline(always)]
pub fn combine<W>(
    row: &[W],
    act: &[ActBlock],
    scale: impl Fn(&W) -> f32,
    isum: impl Fn(&W, &ActBlock) -> i32,
) -> f32 {
    let mut s = 0.0f32;
    for (w, a) in row.iter().zip(act) {
        s += (scale(w) * a.d) * isum(w, a) as f32;
    }
    s
}

/// out = W x for Q8_0 weights and quantized activations.
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(per_row)) {
        *o = combine(row, act, |b| b.d.to_f32(), block_dot_q8_0);
    }
}

/// out = W x for Q4_0 weights and quantized activations.
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(per_row)) {
        *o = combine(row, act, |b| b.d.to_f32(), block_dot_q4_0);
    }
}
