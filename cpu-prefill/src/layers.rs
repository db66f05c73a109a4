//! One block's parts over all T tokens at once: the two mixers (spec §6.1, §6.2) around the
//! chunk scan, the short convolution, and the SwiGLU MLP. Per-token arithmetic (norms, gates)
//! uses the runtime's own `math` functions, so it rounds as the decoder does, except SiLU,
//! whose exponential is a vectorized one ([`crate::act`]) within 2 ulp of the runtime's; the
//! linear layers are batched matrix products ([`crate::linalg::project`]).

use crate::act::silu;
use crate::linalg::{dense, mat, mat_mut, matmul, project, PROJ_ROWS};
use crate::par;
use crate::scan::{chunk_scan, Form, ScanInputs, ScanScratch, ScanShape};
use crate::Timer;
use loglinear_runtime::layers::level_weight;
use loglinear_runtime::math::{
    exp, l2norm_in_place, rmsnorm, rmsnorm_in_place, sigmoid, softplus, sqrt,
};
use loglinear_runtime::model::{GdnWeights, Mamba2Weights, MlpWeights};
use loglinear_runtime::{LevelPolicy, ModelConfig};

/// RMSNorm of every row of `x` (`[T][D]`) into `out`.
pub fn rmsnorm_rows(threads: usize, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    par::for_row_blocks(threads, out, d, PROJ_ROWS, |row, block| {
        for (r, or) in block.chunks_exact_mut(d).enumerate() {
            rmsnorm(&x[(row + r) * d..][..d], w, eps, or);
        }
    });
}

/// x += y, elementwise, in parallel row blocks.
pub fn add_rows(threads: usize, x: &mut [f32], y: &[f32], d: usize) {
    par::for_row_blocks(threads, x, d, PROJ_ROWS, |row, block| {
        for (xv, yv) in block.iter_mut().zip(&y[row * d..]) {
            *xv += yv;
        }
    });
}

/// A buffer of `n` floats from `v`, grown if needed. Its contents are whatever the last
/// user left: every caller overwrites (or fills) all of it.
fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Buffers that every layer of one prefill reuses, so that the activations of all T tokens
/// are allocated once per prefill rather than once per layer (fresh pages cost a page fault
/// and a kernel clear each: that was a quarter of the Mamba-2 prefill's time).
#[derive(Default)]
pub struct Work {
    /// Mamba-2 in_proj output `[T][rows]`; GDN pre-conv projection `[T][channels]`.
    proj: Vec<f32>,
    /// Mamba-2 conv output `[T][conv channels]`.
    xbc: Vec<f32>,
    /// Scan inputs.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    lam: Vec<f32>,
    /// GDN a, b, λ-input projections and output gate.
    a: Vec<f32>,
    b: Vec<f32>,
    l_in: Vec<f32>,
    gate: Vec<f32>,
    /// Scan output `[T][heads][dv]`, then the mixer's pre-out_proj activations.
    o: Vec<f32>,
    /// The scan's level readouts and per-chunk quantities.
    scan: ScanScratch,
    /// MLP gate and up activations `[T][I]`.
    mlp_gate: Vec<f32>,
    mlp_up: Vec<f32>,
}

/// The input of a short convolution: channel `ch` of token t is
/// `src[t * stride + offset + ch]`, for tokens `0..t_len`.
pub struct ConvInput<'a> {
    /// Token-major rows that hold the channels.
    pub src: &'a [f32],
    /// Floats per token row of `src`.
    pub stride: usize,
    /// Where the channels start in each row.
    pub offset: usize,
    /// Tokens.
    pub t_len: usize,
}

/// A short convolution's parameters.
pub struct ConvWeights<'a> {
    /// Taps `[channels][width]`.
    pub weight: &'a [f32],
    /// Per-channel bias (Mamba-2), or none (GDN).
    pub bias: Option<&'a [f32]>,
    /// Taps per channel (W).
    pub width: usize,
}

/// The depthwise causal convolution + SiLU over all tokens, and the conv state it leaves.
///
/// Output `[T][channels]` is SiLU(Σ_w in[t − W + 1 + w] · weight[ch][w] + bias[ch]) with zeros
/// before the first token, summed in the decoder's order (w ascending, from zero); `state`
/// (`[channels][W]`) gets the last W inputs, newest in column W − 1, zero where that token does
/// not exist (the decoder's conv state after T tokens). The loops run along channels, so they
/// vectorize.
pub fn short_conv(
    threads: usize,
    input: &ConvInput<'_>,
    weights: &ConvWeights<'_>,
    out: &mut [f32],
    state: &mut [f32],
) {
    let ConvInput {
        src,
        stride,
        offset,
        t_len,
    } = *input;
    let ConvWeights {
        weight,
        bias,
        width,
    } = *weights;
    let channels = state.len() / width;
    // Weights as [W][channels], so that tap w of every channel is one contiguous row.
    let mut taps = vec![0.0f32; width * channels];
    for (ch, wrow) in weight.chunks_exact(width).enumerate().take(channels) {
        for (w, &x) in wrow.iter().enumerate() {
            taps[w * channels + ch] = x;
        }
    }
    let out = &mut out[..t_len * channels];
    par::for_row_blocks(threads, out, channels, PROJ_ROWS, |row, block| {
        for (r, o) in block.chunks_exact_mut(channels).enumerate() {
            let t = row + r;
            o.fill(0.0);
            for (w, tap) in taps.chunks_exact(channels).enumerate() {
                // Tap w reads token t − (W − 1 − w); before the first token the input is zero.
                let back = width - 1 - w;
                if t >= back {
                    let x = &src[(t - back) * stride + offset..][..channels];
                    for ((y, &xv), &wv) in o.iter_mut().zip(x).zip(tap) {
                        *y += xv * wv;
                    }
                }
            }
            if let Some(b) = bias {
                for (y, &bv) in o.iter_mut().zip(b) {
                    *y += bv;
                }
            }
            for y in o.iter_mut() {
                *y = silu(*y);
            }
        }
    });
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

/// What every mixer of one prefill runs with.
pub struct MixerSetup<'a> {
    /// The model's shape.
    pub config: &'a ModelConfig,
    /// Worker threads.
    pub threads: usize,
    /// Which Fenwick levels the hand-off state keeps.
    pub policy: LevelPolicy,
}

impl MixerSetup<'_> {
    /// The chunk scan's shape for `t_len` tokens of this model: Mamba-2 heads share q and k
    /// (C and B) per group, GDN heads have their own; one λ column for a plain model.
    fn scan_shape(&self, t_len: usize) -> ScanShape {
        let c = self.config;
        let mamba = c.arch.is_mamba2();
        ScanShape {
            form: if mamba { Form::Mamba2 } else { Form::Gdn },
            t: t_len,
            heads: c.num_heads,
            qk_heads: if mamba { c.num_groups } else { c.num_heads },
            dk: c.head_k_dim,
            dv: c.head_v_dim,
            lambda_cols: c.lambda_levels.max(1),
            levels: self.policy.levels(),
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
    setup: &MixerSetup<'_>,
    w: &Mamba2Weights<'_>,
    h: &[f32],
    out: &mut [f32],
    work: &mut Work,
    timer: &mut Timer,
) -> MixerState {
    let (c, threads) = (setup.config, setup.threads);
    let t_len = h.len() / c.hidden_size;
    let shape = setup.scan_shape(t_len);
    let (d, di, hc, p, n, groups) = (
        c.hidden_size,
        c.d_inner(),
        c.num_heads,
        c.head_v_dim,
        c.head_k_dim,
        c.num_groups,
    );
    let (nl, ch, rows) = (c.lambda_levels, c.conv_channels(), c.in_proj_rows());
    let cols = shape.lambda_cols;
    let gn = groups * n;

    // 1. in_proj, split z | xBC | dt | dl per token.
    let zx = sized(&mut work.proj, t_len * rows);
    project(threads, h, d, &dense(&w.in_proj), rows, zx);
    let zx = &*zx;
    // 2. xBC ← SiLU(conv(xBC)), split x | B | C.
    let xbc = sized(&mut work.xbc, t_len * ch);
    let mut conv = vec![0.0f32; ch * c.conv_kernel];
    let input = ConvInput {
        src: zx,
        stride: rows,
        offset: di,
        t_len,
    };
    let weights = ConvWeights {
        weight: w.conv,
        bias: w.conv_bias,
        width: c.conv_kernel,
    };
    short_conv(threads, &input, &weights, xbc, &mut conv);
    let xbc = &*xbc;
    // 3-4. Scan inputs: q = C, k = B per group; dt, g = −exp(A_log)·dt, v = x·dt, λ (1 for
    // plain models), in parallel blocks of tokens.
    let q = sized(&mut work.q, t_len * gn);
    let k = sized(&mut work.k, t_len * gn);
    let v = sized(&mut work.v, t_len * di);
    let g = sized(&mut work.g, t_len * hc);
    let lam = sized(&mut work.lam, t_len * hc * cols);
    let b = PROJ_ROWS;
    let jobs: Vec<_> = q
        .chunks_mut(b * gn)
        .zip(k.chunks_mut(b * gn))
        .zip(v.chunks_mut(b * di))
        .zip(g.chunks_mut(b * hc))
        .zip(lam.chunks_mut(b * hc * cols))
        .enumerate()
        .collect();
    par::map(threads, jobs, |(blk, ((((q, k), v), g), lam))| {
        for r in 0..g.len() / hc {
            let t = blk * b + r;
            let xr = &xbc[t * ch..][..ch];
            k[r * gn..][..gn].copy_from_slice(&xr[di..di + gn]);
            q[r * gn..][..gn].copy_from_slice(&xr[di + gn..di + 2 * gn]);
            let (dt_raw, dl) = zx[t * rows + di + ch..][..hc * (1 + nl)].split_at(hc);
            for hh in 0..hc {
                let i = r * hc + hh;
                let dt = softplus(dt_raw[hh] + w.dt_bias[hh]);
                g[i] = -exp(w.a_log[hh]) * dt;
                for (vv, xv) in v[i * p..][..p].iter_mut().zip(&xr[hh * p..][..p]) {
                    *vv = xv * dt;
                }
                for (l, lv) in lam[i * cols..][..cols].iter_mut().enumerate() {
                    *lv = level_weight(w.lambda_scale, dl, hh * nl + l, 1.0);
                }
            }
        }
    });
    timer.lap(Timer::PRE);

    // 5. The chunk scan.
    let inputs = ScanInputs {
        q,
        k,
        v,
        g,
        beta: &[],
        lam,
    };
    let y = sized(&mut work.o, t_len * di);
    let fenwick = chunk_scan(threads, &shape, &inputs, y, &mut work.scan);
    timer.lap(Timer::SCAN);

    // 5b-7. y = o + D·x (x before the dt scaling), gated RMSNorm per group, out_proj.
    let gs = c.norm_group_size;
    par::for_row_blocks(threads, y, di, PROJ_ROWS, |row, block| {
        for (r, yr) in block.chunks_exact_mut(di).enumerate() {
            let t = row + r;
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
    });
    project(threads, y, di, &dense(&w.out_proj), d, out);
    MixerState { fenwick, conv }
}

/// The (Log-Linear) Gated DeltaNet mixer over all tokens: `h` `[T][D]` → `out` `[T][D]`.
pub fn gdn(
    setup: &MixerSetup<'_>,
    w: &GdnWeights<'_>,
    h: &[f32],
    out: &mut [f32],
    work: &mut Work,
    timer: &mut Timer,
) -> MixerState {
    let (c, threads) = (setup.config, setup.threads);
    let t_len = h.len() / c.hidden_size;
    let shape = setup.scan_shape(t_len);
    let (d, hc, dk, dv, kd, vd) = (
        c.hidden_size,
        c.num_heads,
        c.head_k_dim,
        c.head_v_dim,
        c.key_dim(),
        c.d_inner(),
    );
    let (nl, width) = (c.lambda_levels, c.conv_kernel);
    let cols = shape.lambda_cols;

    // 1. q, k, v = SiLU(ShortConv(proj x)); the conv states q, k, v one after another.
    let mut conv = vec![0.0f32; c.conv_channels() * width];
    let (conv_q, rest) = conv.split_at_mut(kd * width);
    let (conv_k, conv_v) = rest.split_at_mut(kd * width);
    let pre = &mut work.proj;
    let mut conv_one = |wt, n: usize, cw: &[f32], state: &mut [f32], post: &mut Vec<f32>| {
        let pre = sized(pre, t_len * n);
        project(threads, h, d, &dense(wt), n, pre);
        let post = sized(post, t_len * n);
        let input = ConvInput {
            src: pre,
            stride: n,
            offset: 0,
            t_len,
        };
        let weights = ConvWeights {
            weight: cw,
            bias: None,
            width,
        };
        short_conv(threads, &input, &weights, post, state);
    };
    conv_one(&w.q_proj, kd, w.q_conv, conv_q, &mut work.q);
    conv_one(&w.k_proj, kd, w.k_conv, conv_k, &mut work.k);
    conv_one(&w.v_proj, vd, w.v_conv, conv_v, &mut work.v);
    let (q, k, v) = (
        &mut work.q[..t_len * kd],
        &mut work.k[..t_len * kd],
        &work.v[..t_len * vd],
    );
    let a = sized(&mut work.a, t_len * hc);
    project(threads, h, d, &dense(&w.a_proj), hc, a);
    let b = sized(&mut work.b, t_len * hc);
    project(threads, h, d, &dense(&w.b_proj), hc, b);
    let l_in = sized(&mut work.l_in, t_len * hc * nl);
    if let Some(lp) = &w.l_proj {
        project(threads, h, d, &dense(lp), hc * nl, l_in);
    }
    let gate = sized(&mut work.gate, t_len * vd);
    project(threads, h, d, &dense(&w.g_proj), vd, gate);
    let (a, b, l_in, gate) = (&*a, &*b, &*l_in, &*gate);

    // 2-3. q ← l2norm(q)·dk^-1/2, k ← l2norm(k); β, g, λ (·dk^1/2, or 1 for plain models)
    // per token and head. Both scales are applied, as the decoder does, so that rounding
    // matches.
    let q_scale = 1.0 / sqrt(dk as f32);
    let lam_scale = sqrt(dk as f32);
    par::for_row_blocks(threads, q, dk, PROJ_ROWS, |_, block| {
        for qh in block.chunks_exact_mut(dk) {
            l2norm_in_place(qh);
            qh.iter_mut().for_each(|x| *x *= q_scale);
        }
    });
    par::for_row_blocks(threads, k, dk, PROJ_ROWS, |_, block| {
        block.chunks_exact_mut(dk).for_each(l2norm_in_place);
    });
    let g = sized(&mut work.g, t_len * hc);
    let beta = sized(&mut work.beta, t_len * hc);
    let lam = sized(&mut work.lam, t_len * hc * cols);
    let bt = PROJ_ROWS;
    let jobs: Vec<_> = g
        .chunks_mut(bt * hc)
        .zip(beta.chunks_mut(bt * hc))
        .zip(lam.chunks_mut(bt * hc * cols))
        .enumerate()
        .collect();
    par::map(threads, jobs, |(blk, ((g, beta), lam))| {
        for r in 0..g.len() / hc {
            let t = blk * bt + r;
            for hh in 0..hc {
                let (i, ti) = (r * hc + hh, t * hc + hh);
                beta[i] = sigmoid(b[ti]);
                g[i] = -exp(w.a_log[hh]) * softplus(a[ti] + w.dt_bias[hh]);
                // Token t's λ inputs (none for a plain model, where they are not read).
                let l_in_t = l_in.get(t * hc * nl..).unwrap_or_default();
                for (l, lv) in lam[i * cols..][..cols].iter_mut().enumerate() {
                    *lv = level_weight(w.lambda_scale, l_in_t, hh * nl + l, lam_scale);
                }
            }
        }
    });
    timer.lap(Timer::PRE);

    // 4. The chunk scan.
    let inputs = ScanInputs {
        q,
        k,
        v,
        g,
        beta,
        lam,
    };
    let o = sized(&mut work.o, t_len * vd);
    let fenwick = chunk_scan(threads, &shape, &inputs, o, &mut work.scan);
    timer.lap(Timer::SCAN);

    // 5-6. Per head RMSNorm_dv(o) · w · SiLU(g_proj x), then o_proj.
    par::for_row_blocks(threads, o, dv, PROJ_ROWS * hc, |row, block| {
        for (r, orow) in block.chunks_exact_mut(dv).enumerate() {
            rmsnorm_in_place(orow, w.o_norm, c.norm_eps);
            for (ov, gv) in orow.iter_mut().zip(&gate[(row + r) * dv..][..dv]) {
                *ov *= silu(*gv);
            }
        }
    });
    project(threads, o, vd, &dense(&w.o_proj), d, out);
    MixerState { fenwick, conv }
}

/// The SwiGLU MLP over all tokens: `out` = down(SiLU(gate h) ⊙ up h), in parallel blocks of
/// [`PROJ_ROWS`] tokens (each block: two products, the activation, the down product).
pub fn mlp(w: &MlpWeights<'_>, threads: usize, h: &[f32], out: &mut [f32], work: &mut Work) {
    let (d, inter) = (w.gate.cols, w.gate.rows);
    let t_len = h.len() / d;
    let (gate_w, up_w, down_w) = (dense(&w.gate), dense(&w.up), dense(&w.down));
    let (gate_t, up_t, down_t) = (
        mat(&gate_w, inter, d),
        mat(&up_w, inter, d),
        mat(&down_w, d, inter),
    );
    let gate = sized(&mut work.mlp_gate, t_len * inter);
    let up = sized(&mut work.mlp_up, t_len * inter);
    let b = PROJ_ROWS;
    let jobs: Vec<_> = out
        .chunks_mut(b * d)
        .zip(gate.chunks_mut(b * inter))
        .zip(up.chunks_mut(b * inter))
        .enumerate()
        .collect();
    par::map(threads, jobs, |(blk, ((block, gate), up))| {
        let rows = block.len() / d;
        let hb = mat(&h[blk * b * d..], rows, d);
        matmul(&hb, &gate_t.t(), &mut mat_mut(gate, rows, inter));
        matmul(&hb, &up_t.t(), &mut mat_mut(up, rows, inter));
        for (gv, uv) in gate.iter_mut().zip(up.iter()) {
            *gv = silu(*gv) * uv;
        }
        matmul(
            &mat(gate, rows, inter),
            &down_t.t(),
            &mut mat_mut(block, rows, d),
        );
    });
}
