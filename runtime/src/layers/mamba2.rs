//! (Log-Linear) Mamba-2 mixer, one token (spec §6.1).

use crate::config::ModelConfig;
use crate::fenwick::{HeadStep, StateElem};
use crate::layers::{conv_step, level_weight, LayerState};
use crate::math::{exp, rmsnorm_in_place, silu, softplus};
use crate::model::{Mamba2Weights, Model};
use crate::quant::ActBlock;
use crate::tensor::MatvecInput;

/// Scratch floats: the in_proj output and the d_inner output.
pub fn scratch_len(c: &ModelConfig) -> usize {
    c.in_proj_rows() + c.d_inner()
}

/// One token through the mixer with weights `w`: `x` (D) → `out` (D); `act` is scratch for
/// [`crate::quant::Activations::Q8`] inputs.
pub fn step<E: StateElem>(
    model: &Model<'_>,
    w: &Mamba2Weights<'_>,
    state: &mut LayerState<'_, E>,
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
    act: &mut [ActBlock],
) {
    let c = model.config();
    let mode = model.activations();
    let (fenwick, conv, t) = (&mut state.fenwick, &mut *state.conv, state.t);
    let (di, h_count, p, n) = (c.d_inner(), c.num_heads, c.head_v_dim, c.head_k_dim);
    let nl = c.lambda_levels;
    let heads_per_group = h_count / c.num_groups;
    let (zx, rest) = scratch.split_at_mut(c.in_proj_rows());
    let y = &mut rest[..di];

    // 1. in_proj, split z | xBC | dt | dl.
    w.in_proj.matvec_input(&MatvecInput::new(x, mode, act), zx);
    let (z, rest) = zx.split_at_mut(di);
    let (xbc, rest) = rest.split_at_mut(c.conv_channels());
    let (dt_raw, dl) = rest.split_at_mut(h_count);

    // 2. xBC ← SiLU(conv(xBC)), split x | B | C.
    conv_step(conv, w.conv, w.conv_bias, c.conv_kernel, xbc);
    let (xs, bc) = xbc.split_at(di);
    let (b_all, c_all) = bc.split_at(c.num_groups * n);

    // Steps 3-5 per head, on the Fenwick state (merge is shared by all heads).
    fenwick.merge(t);
    for h in 0..h_count {
        let dt = softplus(dt_raw[h] + w.dt_bias[h]);
        let alpha = exp(-exp(w.a_log[h]) * dt);
        let grp = h / heads_per_group;
        let k = &b_all[grp * n..(grp + 1) * n];
        let q = &c_all[grp * n..(grp + 1) * n];
        let xh = &xs[h * p..(h + 1) * p];
        let yh = &mut y[h * p..(h + 1) * p];
        // v = x · dt (the D-skip below uses x before this scaling).
        for (v, xv) in yh.iter_mut().zip(xh) {
            *v = xv * dt;
        }
        let lam = |l: u32| level_weight(w.lambda_scale, dl, h * nl + l as usize, 1.0);
        // Decay, insert and readout in one fused step (bit-identical to the separate ones,
        // one pass per level); v in yh is consumed and yh gets the output.
        let step = HeadStep {
            t,
            head: h,
            k,
            q,
            lambda: lam,
            v_out: yh,
        };
        fenwick.step_decay(step, alpha);
        let d = w.d_skip[h];
        for (yv, xv) in yh.iter_mut().zip(xh) {
            *yv += d * xv;
        }
    }

    // 6. Gated RMSNorm (norm after gate), per norm group.
    for (yv, zv) in y.iter_mut().zip(z.iter()) {
        *yv *= silu(*zv);
    }
    let gs = c.norm_group_size;
    for (yg, wg) in y.chunks_exact_mut(gs).zip(w.norm.chunks_exact(gs)) {
        rmsnorm_in_place(yg, wg, c.norm_eps);
    }

    // 7. out_proj.
    w.out_proj
        .matvec_input(&MatvecInput::new(y, mode, act), out);
}
