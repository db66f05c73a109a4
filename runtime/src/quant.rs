//! ggml's quantized block layouts (bit-exact with ggml/gguf-py) and the portable kernels that
//! work on them directly: dequantize a row, and dot a row with an f32 vector.
//!
//! * Q8_0: 32 weights as `d · q`, d an f16 scale and q i8 (34 bytes).
//! * Q4_0: 32 weights as `d · (q − 8)`, q a 4-bit value; byte j holds weight j in its low nibble
//!   and weight j + 16 in its high nibble (18 bytes).

use half::f16;

/// Weights per block for Q8_0 and Q4_0.
pub const QK: usize = 32;

/// A Q8_0 block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants.
    pub qs: [i8; QK],
}

/// A Q4_0 block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed 4-bit quants.
    pub qs: [u8; QK / 2],
}

// ggml's sizes: a file written elsewhere must map onto these structs byte for byte.
const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(core::mem::align_of::<BlockQ8_0>() == 2);
const _: () = assert!(core::mem::align_of::<BlockQ4_0>() == 2);

impl BlockQ8_0 {
    /// Quantizes 32 weights as ggml's `quantize_row_q8_0_ref`: d = max|x| / 127, q = round(x / d).
    pub fn quantize(x: &[f32; QK]) -> Self {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        for (q, v) in qs.iter_mut().zip(x) {
            *q = libm::roundf(v * id) as i8;
        }
        Self {
            d: f16::from_f32(d),
            qs,
        }
    }

    /// The 32 weights.
    pub fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * q as f32;
        }
    }

    /// Σ w·x over the block.
    #[inline]
    pub fn dot(&self, x: &[f32]) -> f32 {
        let s: f32 = self.qs.iter().zip(x).map(|(&q, v)| q as f32 * v).sum();
        s * self.d.to_f32()
    }
}

impl BlockQ4_0 {
    /// Quantizes 32 weights as ggml's `quantize_row_q4_0_ref`: the signed value of largest
    /// magnitude maps to −8, d = max / −8, q = min(15, ⌊x / d + 8.5⌋).
    pub fn quantize(x: &[f32; QK]) -> Self {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let q0 = ((x[j] * id + 8.5) as i32).min(15) as u8;
            let q1 = ((x[j + QK / 2] * id + 8.5) as i32).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
        Self {
            d: f16::from_f32(d),
            qs,
        }
    }

    /// The 32 weights.
    pub fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (j, &b) in self.qs.iter().enumerate() {
            out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
            out[j + QK / 2] = d * ((b >> 4) as i32 - 8) as f32;
        }
    }

    /// Σ w·x over the block.
    #[inline]
    pub fn dot(&self, x: &[f32]) -> f32 {
        let (lo, hi) = x.split_at(QK / 2);
        let mut s = 0.0f32;
        for ((&b, a), c) in self.qs.iter().zip(lo).zip(hi) {
            s += ((b & 0x0F) as i32 - 8) as f32 * a + ((b >> 4) as i32 - 8) as f32 * c;
        }
        s * self.d.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(scale: f32) -> [f32; QK] {
        core::array::from_fn(|i| (i as f32 - 13.3) * scale)
    }

    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let x = ramp(0.37);
        let b = BlockQ8_0::quantize(&x);
        let mut y = [0f32; QK];
        b.dequantize(&mut y);
        let step = b.d.to_f32();
        for (a, c) in x.iter().zip(&y) {
            assert!((a - c).abs() <= 0.5 * step + 1e-6, "{a} vs {c}");
        }
        let ones = [1f32; QK];
        assert!((b.dot(&ones) - y.iter().sum::<f32>()).abs() < 1e-4);
    }

    #[test]
    fn q4_0_round_trip_is_within_one_step() {
        let x = ramp(-0.11);
        let b = BlockQ4_0::quantize(&x);
        let mut y = [0f32; QK];
        b.dequantize(&mut y);
        let step = b.d.to_f32().abs();
        for (a, c) in x.iter().zip(&y) {
            assert!((a - c).abs() <= step + 1e-6, "{a} vs {c}");
        }
        let xs: [f32; QK] = core::array::from_fn(|i| i as f32);
        let want: f32 = y.iter().zip(&xs).map(|(a, b)| a * b).sum();
        assert!((b.dot(&xs) - want).abs() < 1e-3);
    }

    #[test]
    fn zero_blocks_stay_zero() {
        let z = [0f32; QK];
        assert_eq!(BlockQ8_0::quantize(&z).dot(&ramp(1.0)), 0.0);
        assert_eq!(BlockQ4_0::quantize(&z).dot(&ramp(1.0)), 0.0);
    }
}
