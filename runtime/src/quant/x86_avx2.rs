//! AVX2 integer kernels for x86_64, chosen at run time. Bit-identical to [`super::portable`].
//!
//! (Placeholder: forwards to the portable kernels until the AVX2 code lands.)

use super::{portable, ActBlock, BlockQ4_0, BlockQ8_0};

/// Whether this CPU has AVX2.
pub fn available() -> bool {
    false
}

/// [`portable::matvec_q8_0`] with AVX2.
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    portable::matvec_q8_0(w, act, out)
}

/// [`portable::matvec_q4_0`] with AVX2.
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    portable::matvec_q4_0(w, act, out)
}
