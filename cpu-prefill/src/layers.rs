//! One block's parts over all T tokens at once: the two mixers (spec §6.1, §6.2) around the
//! chunk scan, the short convolution, and the SwiGLU MLP. Per-token arithmetic (norms, gates,
//! activations) uses the runtime's own `math` functions, so it rounds as the decoder does; the
//! linear layers are batched matrix products ([`crate::linalg::project`]).

use crate::linalg::{dense, gemm, mat, mat_mut, project, PROJ_ROWS};
use crate::par;
use crate::scan::{chunk_scan, Form, ScanInputs, ScanShape};
use crate::Timer;
use loglinear_runtime::math::{
    dot, exp, l2norm_in_place, rmsnorm, rmsnorm_in_place, sigmoid, silu, softplus, sqrt,
};
use loglinear_runtime::model::{GdnWeights, Mamba2Weights, MlpWeights};
use loglinear_runtime::{LevelPolicy, ModelConfig};

/// RMSNorm of every row of `x` (`[T][D]`) into `out`.
pub fn rmsnorm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rmsnorm(xr, w, eps, or);
    }
}

/// The depthwise causal convolution + SiLU over all tokens, and the conv state it leaves.
///
/// Input channel `ch` of token t is `src[t * stride + offset + ch]`. Output `[T][channels]`
/// is SiLU(Σ_w in[t − W + 1 + w] · weight[ch][w] + bias[ch]) with zeros before the first token,
/// summed in the decoder's order; `state` (`[channels][W]`) gets the last W inputs, newest in
/// column W − 1, zero where that token does not exist (the decoder's conv state after T tokens).
#[allow(clippy::too_many_arguments)]
pub fn short_conv(
    src: &[f32],
    stride: usize,
    offset: usize,
    t_len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    width: usize,
    out: &mut [f32],
    state: &mut [f32],
) {
    let channels = state.len() / width;
    let mut row = vec![0.0f32; width];
    for t in 0..t_len {
        for ch in 0..channels {
            for (w, r) in row.iter_mut().enumerate() {
                // Token t − (W − 1) + w.
                let back = width - 1 - w;
                *r = if t >= back {
                    src[(t - back) * stride + offset + ch]
                } else {
                    0.0
                };
            }
            let mut y = dot(&row, &weight[ch * width..][..width]);
            if let Some(b) = bias {
                y += b[ch];
            }
            out[t * channels + ch] = silu(y);
        }
    }
    for (ch, srow) in state.chunks_exact_mut(width).enumerate() {
        for (j, s) in srow.iter_mut().enumerate() {
            let back = width - 1 - j;
            *s = if t_len > back {
                src[(t_len - 1 - back) * stride + offset + ch]
            } else {
                0.0
            };
        }
    }
}

/// What a mixer leaves besides its output: the layer's hand-off state.
pub struct MixerState {
    /// Fenwick state `[levels][heads][dk][dv]`.
    pub fenwick: Vec<f32>,
    /// Conv state `[channels][W]` (GDN: q, then k, then v channels).
    pub conv: Vec<f32>,
}

/// The (Log-Linear) Mamba-2 mixer over all tokens: `h` `[T][D]` (normed) → `out` `[T][D]`.
pub fn mamba2(
    c: &ModelConfig,
    w: &Mamba2Weights<'_>,
    threads: usize,
    policy: LevelPolicy,
    h: &[f32],
    out: &mut [f32],
    timer: &mut Timer,
) -> MixerState {
    let t_len = h.len() / c.hidden_size;
    let (d, di, hc, p, n, groups) = (
        c.hidden_size,
        c.d_inner(),
        c.num_heads,
        c.head_v_dim,
        c.head_k_dim,
        c.num_groups,
    );
    let (nl, ch, rows) = (c.lambda_levels, c.conv_channels(), c.in_proj_rows());
    let cols = nl.max(1);

    // 1. in_proj, split z | xBC | dt | dl per token.
    let mut zx = vec![0.0f32; t_len * rows];
    project(threads, h, d, &dense(&w.in_proj), rows, &mut zx);
    // 2. xBC ← SiLU(conv(xBC)), split x | B | C.
    let mut xbc = vec![0.0f32; t_len * ch];
    let mut conv = vec![0.0f32; ch * c.conv_kernel];
    short_conv(
        &zx,
        rows,
        di,
        t_len,
        w.conv,
        w.conv_bias,
        c.conv_kernel,
        &mut xbc,
        &mut conv,
    );
    // 3-4. Scan inputs: q = C, k = B per group; dt, g = −exp(A_log)·dt, v = x·dt, λ.
    let gn = groups * n;
    let mut q = vec![0.0f32; t_len * gn];
    let mut k = vec![0.0f32; t_len * gn];
    let mut v = vec![0.0f32; t_len * di];
    let mut g = vec![0.0f32; t_len * hc];
    let mut lam = vec![1.0f32; t_len * hc * cols];
    for t in 0..t_len {
        let xr = &xbc[t * ch..][..ch];
        k[t * gn..][..gn].copy_from_slice(&xr[di..di + gn]);
        q[t * gn..][..gn].copy_from_slice(&xr[di + gn..di + 2 * gn]);
        let zr = &zx[t * rows..][..rows];
        let (dt_raw, dl) = zr[di + ch..].split_at(hc);
        for hh in 0..hc {
            let dt = softplus(dt_raw[hh] + w.dt_bias[hh]);
            g[t * hc + hh] = -exp(w.a_log[hh]) * dt;
            for (vv, xv) in v[(t * hc + hh) * p..][..p]
                .iter_mut()
                .zip(&xr[hh * p..][..p])
            {
                *vv = xv * dt;
            }
            if let Some(ls) = w.lambda_scale {
                for l in 0..nl {
                    let i = hh * nl + l;
                    lam[(t * hc + hh) * cols + l] = softplus(ls[i] * dl[i]);
                }
            }
        }
    }
    timer.lap(Timer::PRE);

    // 5. The chunk scan.
    let shape = ScanShape {
        form: Form::Mamba2,
        t: t_len,
        heads: hc,
        qk_heads: groups,
        dk: n,
        dv: p,
        lambda_cols: cols,
        policy,
    };
    let scan = chunk_scan(
        threads,
        &shape,
        &ScanInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &[],
            lam: &lam,
        },
    );
    timer.lap(Timer::SCAN);

    // 5b-7. y = o + D·x (x before the dt scaling), gated RMSNorm per group, out_proj.
    let mut y = scan.o;
    let gs = c.norm_group_size;
    for t in 0..t_len {
        let yr = &mut y[t * di..][..di];
        let xr = &xbc[t * ch..][..di];
        let zr = &zx[t * rows..][..di];
        for hh in 0..hc {
            let dsk = w.d_skip[hh];
            for (yv, xv) in yr[hh * p..][..p].iter_mut().zip(&xr[hh * p..][..p]) {
                *yv += dsk * xv;
            }
        }
        for (yv, zv) in yr.iter_mut().zip(zr) {
            *yv *= silu(*zv);
        }
        for (yg, wg) in yr.chunks_exact_mut(gs).zip(w.norm.chunks_exact(gs)) {
            rmsnorm_in_place(yg, wg, c.norm_eps);
        }
    }
    project(threads, &y, di, &dense(&w.out_proj), d, out);
    MixerState {
        fenwick: scan.state,
        conv,
    }
}

/// The (Log-Linear) Gated DeltaNet mixer over all tokens: `h` `[T][D]` → `out` `[T][D]`.
#[allow(clippy::too_many_arguments)]
pub fn gdn(
    c: &ModelConfig,
    w: &GdnWeights<'_>,
    threads: usize,
    policy: LevelPolicy,
    h: &[f32],
    out: &mut [f32],
    timer: &mut Timer,
) -> MixerState {
    let t_len = h.len() / c.hidden_size;
    let (d, hc, dk, dv, kd, vd) = (
        c.hidden_size,
        c.num_heads,
        c.head_k_dim,
        c.head_v_dim,
        c.key_dim(),
        c.d_inner(),
    );
    let (nl, width) = (c.lambda_levels, c.conv_kernel);
    let cols = nl.max(1);

    // 1. q, k, v = SiLU(ShortConv(proj x)); the conv states q, k, v one after another.
    let mut conv = vec![0.0f32; c.conv_channels() * width];
    let (conv_q, rest) = conv.split_at_mut(kd * width);
    let (conv_k, conv_v) = rest.split_at_mut(kd * width);
    let conv_one = |wt, n: usize, cw: &[f32], state: &mut [f32]| {
        let mut pre = vec![0.0f32; t_len * n];
        project(threads, h, d, &dense(wt), n, &mut pre);
        let mut post = vec![0.0f32; t_len * n];
        short_conv(&pre, n, 0, t_len, cw, None, width, &mut post, state);
        post
    };
    let mut q = conv_one(&w.q_proj, kd, w.q_conv, conv_q);
    let mut k = conv_one(&w.k_proj, kd, w.k_conv, conv_k);
    let v = conv_one(&w.v_proj, vd, w.v_conv, conv_v);
    let mut a = vec![0.0f32; t_len * hc];
    project(threads, h, d, &dense(&w.a_proj), hc, &mut a);
    let mut b = vec![0.0f32; t_len * hc];
    project(threads, h, d, &dense(&w.b_proj), hc, &mut b);
    let mut l_in = vec![0.0f32; t_len * hc * nl];
    if let Some(lp) = &w.l_proj {
        project(threads, h, d, &dense(lp), hc * nl, &mut l_in);
    }
    let mut gate = vec![0.0f32; t_len * vd];
    project(threads, h, d, &dense(&w.g_proj), vd, &mut gate);

    // 2-3. q ← l2norm(q)·dk^-1/2, k ← l2norm(k); β, g, λ (·dk^1/2) per token and head. Both
    // scales are applied, as the decoder does, so that rounding matches.
    let q_scale = 1.0 / sqrt(dk as f32);
    let lam_scale = sqrt(dk as f32);
    let mut beta = vec![0.0f32; t_len * hc];
    let mut g = vec![0.0f32; t_len * hc];
    let mut lam = vec![1.0f32; t_len * hc * cols];
    for t in 0..t_len {
        for hh in 0..hc {
            let i = t * hc + hh;
            let qh = &mut q[i * dk..][..dk];
            l2norm_in_place(qh);
            qh.iter_mut().for_each(|x| *x *= q_scale);
            l2norm_in_place(&mut k[i * dk..][..dk]);
            beta[i] = sigmoid(b[i]);
            g[i] = -exp(w.a_log[hh]) * softplus(a[i] + w.dt_bias[hh]);
            if let Some(ls) = w.lambda_scale {
                for l in 0..nl {
                    let j = hh * nl + l;
                    lam[i * cols + l] = softplus(ls[j] * l_in[t * hc * nl + j]) * lam_scale;
                }
            }
        }
    }
    timer.lap(Timer::PRE);

    // 4. The chunk scan.
    let shape = ScanShape {
        form: Form::Gdn,
        t: t_len,
        heads: hc,
        qk_heads: hc,
        dk,
        dv,
        lambda_cols: cols,
        policy,
    };
    let scan = chunk_scan(
        threads,
        &shape,
        &ScanInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            lam: &lam,
        },
    );
    timer.lap(Timer::SCAN);

    // 5-6. Per head RMSNorm_dv(o) · w · SiLU(g_proj x), then o_proj.
    let mut o = scan.o;
    for (orow, grow) in o.chunks_exact_mut(dv).zip(gate.chunks_exact(dv)) {
        rmsnorm_in_place(orow, w.o_norm, c.norm_eps);
        for (ov, gv) in orow.iter_mut().zip(grow) {
            *ov *= silu(*gv);
        }
    }
    project(threads, &o, vd, &dense(&w.o_proj), d, out);
    MixerState {
        fenwick: scan.state,
        conv,
    }
}

/// The SwiGLU MLP over all tokens: `out` = down(SiLU(gate h) ⊙ up h), fused per block of
/// [`PROJ_ROWS`] tokens so that the intermediate activations never exist for all T at once.
pub fn mlp(w: &MlpWeights<'_>, threads: usize, h: &[f32], out: &mut [f32]) {
    let (d, inter) = (w.gate.cols, w.gate.rows);
    let (gate_w, up_w, down_w) = (dense(&w.gate), dense(&w.up), dense(&w.down));
    let (gate_t, up_t, down_t) = (
        mat(&gate_w, inter, d),
        mat(&up_w, inter, d),
        mat(&down_w, d, inter),
    );
    par::for_row_blocks(threads, out, d, PROJ_ROWS, |row, block| {
        let rows = block.len() / d;
        let hb = mat(&h[row * d..], rows, d);
        let mut gate = vec![0.0f32; rows * inter];
        let mut up = vec![0.0f32; rows * inter];
        gemm(
            1.0,
            &hb,
            &gate_t.t(),
            0.0,
            &mut mat_mut(&mut gate, rows, inter),
        );
        gemm(1.0, &hb, &up_t.t(), 0.0, &mut mat_mut(&mut up, rows, inter));
        for (gv, uv) in gate.iter_mut().zip(&up) {
            *gv = silu(*gv) * uv;
        }
        gemm(
            1.0,
            &mat(&gate, rows, inter),
            &down_t.t(),
            0.0,
            &mut mat_mut(block, rows, d),
        );
    });
}
