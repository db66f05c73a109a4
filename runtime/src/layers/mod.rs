//! One decode step of each block part: the two mixers (spec §6.1, §6.2), the short causal
//! convolution and the SwiGLU MLP. Every function works on caller-provided buffers.

pub mod gdn;
pub mod mamba2;

use crate::config::ModelConfig;
use crate::fenwick::{FenwickState, StateElem};
use crate::math::silu;
use crate::model::{MlpWeights, Model, ModelError};
use crate::quant::{ActBlock, Activations};
use crate::tensor::MatvecInput;

/// One step of the depthwise causal convolution followed by SiLU, for every channel.
///
/// `state` is `[channels][W]` holding the last W pre-conv inputs, newest in column W−1
/// (the official `conv_states` layout). On entry `x` is the new input; on exit it is
/// `SiLU(Σ_w state[c][w]·weight[c][w] + bias[c])`.
pub fn conv_step(
    state: &mut [f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    width: usize,
    x: &mut [f32],
) {
    for (c, ((xc, row), wrow)) in x
        .iter_mut()
        .zip(state.chunks_exact_mut(width))
        .zip(weight.chunks_exact(width))
        .enumerate()
    {
        // Width 4 (every shipped model) shifts in registers; `copy_within` is a memmove call
        // per channel.
        match <&mut [f32; 4]>::try_from(&mut *row) {
            Ok(r) => *r = [r[1], r[2], r[3], *xc],
            Err(_) => {
                row.copy_within(1.., 0);
                row[width - 1] = *xc;
            }
        }
        let mut y = crate::math::dot(row, wrow);
        if let Some(b) = bias {
            y += b[c];
        }
        *xc = silu(y);
    }
}

/// λ of one (head, level) pair (spec §5): `softplus(L[i] · l_in[i]) · scale`, where `i` indexes
/// the pair in both inputs, `scale` is √dk for Gated DeltaNet and 1 for Mamba-2; 1 for a plain
/// model (`lambda_scale` `None`, and `l_in` is not read). The decoder and the CPU prefill both
/// call this, so the two cannot drift.
#[inline]
pub fn level_weight(lambda_scale: Option<&[f32]>, l_in: &[f32], i: usize, scale: f32) -> f32 {
    match lambda_scale {
        Some(ls) => crate::math::softplus(ls[i] * l_in[i]) * scale,
        None => 1.0,
    }
}

/// Scratch floats the MLP needs: gate and up activations.
pub fn mlp_scratch_len(c: &ModelConfig) -> usize {
    2 * c.intermediate_size
}

/// out = down(SiLU(gate x) ⊙ up x). `act` is scratch for [`Activations::Q8`] inputs
/// ([`Model::act_blocks`] blocks).
pub fn mlp_step(
    w: &MlpWeights<'_>,
    mode: Activations,
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    act: &mut [ActBlock],
) {
    let (gate, rest) = scratch.split_at_mut(w.gate.rows);
    let up = &mut rest[..w.up.rows];
    let xin = MatvecInput::new(x, mode, act);
    w.gate.matvec_input(&xin, gate);
    w.up.matvec_input(&xin, up);
    for (g, u) in gate.iter_mut().zip(up.iter()) {
        *g = silu(*g) * u;
    }
    w.down.matvec_input(&MatvecInput::new(gate, mode, act), out);
}

/// Scratch floats the mixer of this model needs for one step.
pub fn mixer_scratch_len(c: &ModelConfig) -> usize {
    if c.arch.is_mamba2() {
        mamba2::scratch_len(c)
    } else {
        gdn::scratch_len(c)
    }
}

/// One block's recurrent state while it takes a token.
pub struct LayerState<'a, E: StateElem> {
    /// The Fenwick levels of the block's mixer.
    pub fenwick: FenwickState<'a, E>,
    /// The conv window of the block's mixer, in the official `conv_states` layout.
    pub conv: &'a mut [f32],
    /// The position of the token being fed.
    pub t: u64,
}

/// One token through the mixer of block `layer`, whichever architecture the model has:
/// `x` (D) → `out` (D). `scratch` has [`mixer_scratch_len`] floats and `act`
/// [`Model::act_blocks`] blocks (used when the model runs with [`Activations::Q8`]).
pub fn mixer_step<E: StateElem>(
    model: &Model<'_>,
    layer: usize,
    state: &mut LayerState<'_, E>,
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    act: &mut [ActBlock],
) -> Result<(), ModelError> {
    if model.config().arch.is_mamba2() {
        mamba2::step(model, &model.mamba2(layer)?, state, x, out, scratch, act);
    } else {
        gdn::step(model, &model.gdn(layer)?, state, x, out, scratch, act);
    }
    Ok(())
}
