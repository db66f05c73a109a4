//! Dense f32 matrices: weights dequantized once per prefill, and the matrix products of the
//! prefill, all through `ndarray`'s `general_mat_mul` (matrixmultiply's sgemm: packed, blocked,
//! with run-time AVX/FMA detection), so that this crate needs no `unsafe`.

use crate::par;
use loglinear_runtime::TensorView;
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2};
use std::borrow::Cow;

/// Rows per job of a batched projection. Fixed (not derived from the thread count), so that
/// every product is the same call whatever the number of threads.
pub const PROJ_ROWS: usize = 256;

/// A row-major `rows × cols` view of `data[..rows * cols]`.
///
/// Every caller sizes its buffers from the same model dimensions it passes here, so a size
/// mismatch is a bug in this crate, not bad input.
pub fn mat(data: &[f32], rows: usize, cols: usize) -> ArrayView2<'_, f32> {
    ArrayView2::from_shape((rows, cols), &data[..rows * cols])
        .expect("internal: matrix view larger than its buffer")
}

/// A mutable row-major `rows × cols` view of `data[..rows * cols]` (see [`mat`]).
pub fn mat_mut(data: &mut [f32], rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
    ArrayViewMut2::from_shape((rows, cols), &mut data[..rows * cols])
        .expect("internal: matrix view larger than its buffer")
}

/// c = a b.
pub fn matmul(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, c: &mut ArrayViewMut2<'_, f32>) {
    general_mat_mul(1.0, a, b, 0.0, c);
}

/// c += a b.
pub fn matmul_add(
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    c: &mut ArrayViewMut2<'_, f32>,
) {
    general_mat_mul(1.0, a, b, 1.0, c);
}

/// c −= a b.
pub fn matmul_sub(
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    c: &mut ArrayViewMut2<'_, f32>,
) {
    general_mat_mul(-1.0, a, b, 1.0, c);
}

/// A weight matrix as dense row-major f32: borrowed when stored as f32, otherwise dequantized
/// row by row with the runtime's own [`TensorView::row_into`] (the same values its `matvec`
/// multiplies with).
pub fn dense<'a>(w: &TensorView<'a>) -> Cow<'a, [f32]> {
    if let Some(d) = w.as_f32() {
        return Cow::Borrowed(d);
    }
    let mut out = vec![0.0f32; w.rows * w.cols];
    for (r, row) in out.chunks_exact_mut(w.cols.max(1)).enumerate() {
        w.row_into(r, row);
    }
    Cow::Owned(out)
}

/// out `[T][n]` = x `[T][k]` · wᵀ, with w `[n][k]` (a linear layer over every token), in
/// parallel blocks of [`PROJ_ROWS`] tokens.
pub fn project(threads: usize, x: &[f32], k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    let wt = mat(w, n, k);
    let wt = wt.t();
    par::for_row_blocks(threads, out, n, PROJ_ROWS, |row, block| {
        let rows = block.len() / n;
        let xb = mat(&x[row * k..], rows, k);
        matmul(&xb, &wt, &mut mat_mut(block, rows, n));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_matches_naive() {
        let (t, k, n) = (130, 7, 5);
        let x: Vec<f32> = (0..t * k).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 13 % 7) as f32) * 0.5).collect();
        let mut out = vec![0.0; t * n];
        project(2, &x, k, &w, n, &mut out);
        for r in 0..t {
            for c in 0..n {
                let want: f32 = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
                assert_eq!(out[r * n + c], want);
            }
        }
    }
}
