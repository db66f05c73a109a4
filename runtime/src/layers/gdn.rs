//! (Log-Linear) Gated DeltaNet mixer, one token (spec §6.2).

use crate::config::ModelConfig;
use crate::fenwick::{HeadStep, StateElem};
use crate::layers::{conv_step, level_weight, LayerState};
use crate::math::{exp, l2norm_in_place, rmsnorm_in_place, sigmoid, silu, softplus, sqrt};
use crate::model::{GdnWeights, Model};
use crate::quant::ActBlock;
use crate::tensor::MatvecInput;

/// Scratch floats: q, k, v, gate, a, b, λ inputs, and dv that the separate transition step
/// used (the fused step needs none; kept so that session and planner sizes stay as they are).
pub fn scratch_len(c: &ModelConfig) -> usize {
    2 * c.key_dim()
        + 2 * c.d_inner()
        + 2 * c.num_heads
        + c.num_heads * c.lambda_levels
        + c.head_v_dim
}

/// One token through the mixer with weights `w`: `x` (D) → `out` (D). `state.conv` holds the
/// q, k and v conv states one after another; `act` is scratch for
/// [`crate::quant::Activations::Q8`] inputs.
pub fn step<E: StateElem>(
    model: &Model<'_>,
    w: &GdnWeights<'_>,
    state: &mut LayerState<'_, E>,
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    act: &mut [ActBlock],
) {
    let c = model.config();
    let mode = model.activations();
    let (fenwick, conv, t) = (&mut state.fenwick, &mut *state.conv, state.t);
    let (h_count, dk, dv, kd, vd) = (
        c.num_heads,
        c.head_k_dim,
        c.head_v_dim,
        c.key_dim(),
        c.d_inner(),
    );
    let (nl, width) = (c.lambda_levels, c.conv_kernel);
    let (q, rest) = scratch.split_at_mut(kd);
    let (k, rest) = rest.split_at_mut(kd);
    let (v, rest) = rest.split_at_mut(vd);
    let (gate, rest) = rest.split_at_mut(vd);
    let (a, rest) = rest.split_at_mut(h_count);
    let (b, rest) = rest.split_at_mut(h_count);
    let l_in = &mut rest[..h_count * nl];

    // 1. q, k, v = SiLU(ShortConv(proj x)); the other projections.
    // x is quantized once (Q8 mode) for all seven projections that read it.
    let xin = MatvecInput::new(x, mode, act);
    w.q_proj.matvec_input(&xin, q);
    w.k_proj.matvec_input(&xin, k);
    w.v_proj.matvec_input(&xin, v);
    let (conv_q, rest) = conv.split_at_mut(kd * width);
    let (conv_k, conv_v) = rest.split_at_mut(kd * width);
    conv_step(conv_q, w.q_conv, None, width, q);
    conv_step(conv_k, w.k_conv, None, width, k);
    conv_step(conv_v, w.v_conv, None, width, v);
    w.g_proj.matvec_input(&xin, gate);
    w.a_proj.matvec_input(&xin, a);
    w.b_proj.matvec_input(&xin, b);
    if let Some(lp) = &w.l_proj {
        lp.matvec_input(&xin, l_in);
    }

    // The q scale dk^-1/2 and the λ scale dk^1/2 cancel in exact maths (§5.2), but both are
    // applied as the reference does so that rounding matches.
    let q_scale = 1.0 / sqrt(dk as f32);
    let lam_scale = sqrt(dk as f32);
    fenwick.merge(t);
    for h in 0..h_count {
        let qh = &mut q[h * dk..(h + 1) * dk];
        let kh = &mut k[h * dk..(h + 1) * dk];
        l2norm_in_place(qh);
        for x in qh.iter_mut() {
            *x *= q_scale;
        }
        l2norm_in_place(kh);
        let beta = sigmoid(b[h]);
        let alpha = exp(-exp(w.a_log[h]) * softplus(a[h] + w.dt_bias[h]));
        let vh = &mut v[h * dv..(h + 1) * dv];
        let lam = |l: u32| level_weight(w.lambda_scale, l_in, h * nl + l as usize, lam_scale);
        // Transition, insert and readout in one fused step (bit-identical to the separate
        // ones, fewer passes over the state); v is consumed and its slot gets the output.
        let step = HeadStep {
            t,
            head: h,
            k: kh,
            q: qh,
            lambda: lam,
            v_out: vh,
        };
        fenwick.step_delta(step, alpha, beta);
        // Output norm and gate, per head: RMSNorm_dv(o) · w · SiLU(g_proj x).
        rmsnorm_in_place(vh, w.o_norm, c.norm_eps);
        for (o, g) in vh.iter_mut().zip(&gate[h * dv..(h + 1) * dv]) {
            *o *= silu(*g);
        }
    }
    w.o_proj.matvec_input(&MatvecInput::new(v, mode, act), out);
}
