//! Cortex-M0/M0+ (thumbv6m) integer kernels: plain Rust shaped for the core. Bit-identical to
//! [`super::portable`] (the same exact integer sums, the same float order per row).
//!
//! Thumb-1 has LDRSB only with a register offset, 8 low registers and no DSP, so a fully
//! unrolled block dot spends a MOVS on almost every load to materialize its offset, and
//! spills. Here two rows run at once over one activation block (the activation loads
//! shared). Measured under QEMU (`cargo xtask kernel-check --bench microbit`): 19.6 instructions
//! per MAC for Q8_0 and 19.1 for Q4_0 against `portable`'s 20.2 and 19.5: the float part,
//! soft float on this core (two FMULs, an I2F and an FADD per row and block, ~14 instructions
//! per MAC), dominates and is fixed by bit-identity with `portable`; LLVM unrolls and spills
//! the integer part whatever its Rust shape (a rolled loop over slices, an opaque length).
//!
//! Compiled on every target (safe Rust) so the host tests check it too; dispatched on thumbv6m.

use super::{ActBlock, BlockQ4_0, BlockQ8_0, QK};

/// Σ w·q over one Q8_0 block for two rows, not inlined (LLVM still unrolls it fully and spills
/// on Thumb-1, but less than `portable`'s inlined single-row block: see the module doc).
#[inline(never)]
fn dot2_q8(w0: &[i8], w1: &[i8], a: &[i8]) -> (i32, i32) {
    let (mut s0, mut s1) = (0i32, 0i32);
    for ((&x, &p), &q) in a.iter().zip(w0).zip(w1) {
        let x = x as i32;
        s0 += p as i32 * x;
        s1 += q as i32 * x;
    }
    (s0, s1)
}

/// Σ (w − 8)·q over one Q4_0 block for two rows.
#[inline(always)]
fn dot2_q4(w0: &[u8; QK / 2], w1: &[u8; QK / 2], a: &ActBlock) -> (i32, i32) {
    let (mut s0, mut s1) = (0i32, 0i32);
    let mut i = 0;
    while i < QK / 2 {
        let (x, y) = (a.qs[i] as i32, a.qs[i + QK / 2] as i32);
        let (b0, b1) = (w0[i] as i32, w1[i] as i32);
        s0 += (b0 & 0x0F) * x + (b0 >> 4) * y;
        s1 += (b1 & 0x0F) * x + (b1 >> 4) * y;
        i += 1;
    }
    (s0 - 8 * a.sum, s1 - 8 * a.sum)
}

/// Both kernels: rows in pairs (an odd last row with itself), blocks in order, each row's
/// `s += (d_w · d_x) · isum` as `portable::combine`.
#[inline(always)]
fn matvec<W>(
    w: &[W],
    act: &[ActBlock],
    out: &mut [f32],
    scale: impl Fn(&W) -> f32,
    dot2: impl Fn(&W, &W, &ActBlock) -> (i32, i32),
) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    for (o, rows) in out.chunks_mut(2).zip(w.chunks(2 * per_row)) {
        // A partial last row (w not a whole number of rows) is ignored, as `chunks_exact` does.
        let Some(row0) = rows.get(..per_row) else {
            break;
        };
        let row1 = match rows.get(per_row..2 * per_row) {
            Some(r) if o.len() == 2 => r,
            _ => row0,
        };
        let (mut s0, mut s1) = (0.0f32, 0.0f32);
        for ((b0, b1), a) in row0.iter().zip(row1).zip(act) {
            let (i0, i1) = dot2(b0, b1, a);
            s0 += (scale(b0) * a.d) * i0 as f32;
            s1 += (scale(b1) * a.d) * i1 as f32;
        }
        o[0] = s0;
        if let Some(o1) = o.get_mut(1) {
            if !core::ptr::eq(row0, row1) {
                *o1 = s1;
            }
        }
    }
}

/// out = W x for Q8_0 weights and quantized activations.
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_f32(),
        |b0, b1, a| dot2_q8(&b0.qs, &b1.qs, &a.qs),
    )
}

/// out = W x for Q4_0 weights and quantized activations.
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_f32(),
        |b0, b1, a| dot2_q4(&b0.qs, &b1.qs, a),
    )
}

#[cfg(test)]
mod tests {
    use super::super::portable;
    use super::*;

    /// Random blocks and activations, every shape up to 5 rows × 5 blocks, with `out` one
    /// longer than the rows: bit for bit as `portable`, the extra entry untouched.
    #[test]
    fn bit_identical_to_portable() {
        let mut rng = crate::rng::SplitMix64::new(0x1234_5678);
        let mut next = move || rng.next_u64() as u32;
        for rows in 0..=5 {
            for blocks in 1..=5 {
                let w8: Vec<BlockQ8_0> = (0..rows * blocks)
                    .map(|_| BlockQ8_0 {
                        d: half::f16::from_bits((next() as u16) & 0xF7FF),
                        qs: core::array::from_fn(|_| next() as i8),
                    })
                    .collect();
                let w4: Vec<BlockQ4_0> = (0..rows * blocks)
                    .map(|_| BlockQ4_0 {
                        d: half::f16::from_bits((next() as u16) & 0xF7FF),
                        qs: core::array::from_fn(|_| next() as u8),
                    })
                    .collect();
                let act: Vec<ActBlock> = (0..blocks)
                    .map(|_| {
                        let qs: [i8; QK] = core::array::from_fn(|_| (next() % 255) as i8);
                        ActBlock {
                            d: (next() % 1000) as f32 / 997.0,
                            sum: qs.iter().map(|&q| q as i32).sum(),
                            qs,
                        }
                    })
                    .collect();
                let (mut want, mut got) = (vec![7.5f32; rows + 1], vec![7.5f32; rows + 1]);
                portable::matvec_q8_0(&w8, &act, &mut want);
                matvec_q8_0(&w8, &act, &mut got);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&want), bits(&got), "q8_0 {rows}x{blocks}");
                portable::matvec_q4_0(&w4, &act, &mut want);
                matvec_q4_0(&w4, &act, &mut got);
                assert_eq!(bits(&want), bits(&got), "q4_0 {rows}x{blocks}");
            }
        }
    }
}
