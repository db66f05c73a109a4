//! One block's parts over all T tokens at once: the two mixers (spec §6.1, §6.2) around the
//! chunk scan, the short convolution, and the SwiGLU MLP. Per-token arithmetic (norms, gates,
//! activations) uses the runtime's own `math` functions, so it rounds as the decoder does; the
//! linear layers are batched matrix products ([`crate::linalg::project`]).

use crate::linalg::{dense, gemm, mat, mat_mut, project, PROJ_ROWS};
use crate::par;
use crate::scan::{chunk_scan, Form, ScanInputs, ScanShape};
use crate::Timer;
use loglinear_runtime::math::{
    exp, l2norm_in_place, rmsnorm, rmsnorm_in_place, sigmoid, silu, softplus, sqrt,
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

/// Runs `f` on consecutive token ranges of [`PROJ_ROWS`] tokens in parallel; results in order.
fn per_token_block<R: Send>(
    threads: usize,
    t_len: usize,
    f: impl Fn(std::ops::Range<usize>) -> R + Sync,
) -> Vec<R> {
    let ranges: Vec<_> = (0..t_len)
        .step_by(PROJ_ROWS)
        .map(|t0| t0..(t0 + PROJ_ROWS).min(t_len))
        .collect();
    par::map(threads, ranges, f)
}

/// The depthwise causal convolution + SiLU over all tokens, and the conv state it leaves.
///
/// Input channel `ch` of token t is `src[t * stride + offset + ch]`. Output `[T][channels]`
/// is SiLU(Σ_w in[t − W + 1 + w] · weight[ch][w] + bias[ch]) with zeros before the first token,
/// summed in the decoder's order (w ascending, from zero); `state` (`[channels][W]`) gets the
/// last W inputs, newest in column W − 1, zero where that token does not exist (the decoder's
/// conv state after T tokens). The loops run along channels, so they vectorize.
#[allow(clippy::too_many_arguments)]
pub fn short_conv(
    threads: usize,
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

/// Per-token scan inputs of a block of tokens (the fields a mixer does not compute stay
/// empty), concatenated in token order afterwards.
struct ScanBlock {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    lam: Vec<f32>,
}

impl ScanBlock {
    fn concat(blocks: Vec<ScanBlock>) -> ScanBlock {
        let mut all = ScanBlock {
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            g: Vec::new(),
            beta: Vec::new(),
            lam: Vec::new(),
        };
        for b in blocks {
            all.q.extend(b.q);
            all.k.extend(b.k);
            all.v.extend(b.v);
            all.g.extend(b.g);
            all.beta.extend(b.beta);
            all.lam.extend(b.lam);
        }
        all
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
        threads,
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
    let blocks = per_token_block(threads, t_len, |range| {
        let nt = range.len();
        let mut b = ScanBlock {
            q: Vec::with_capacity(nt * gn),
            k: Vec::with_capacity(nt * gn),
            v: vec![0.0f32; nt * di],
            g: vec![0.0f32; nt * hc],
            beta: Vec::new(),
            lam: vec![1.0f32; nt * hc * cols],
        };
        for (r, t) in range.enumerate() {
            let xr = &xbc[t * ch..][..ch];
            b.k.extend_from_slice(&xr[di..di + gn]);
            b.q.extend_from_slice(&xr[di + gn..di + 2 * gn]);
            let zr = &zx[t * rows..][..rows];
            let (dt_raw, dl) = zr[di + ch..].split_at(hc);
            for hh in 0..hc {
                let i = r * hc + hh;
                let dt = softplus(dt_raw[hh] + w.dt_bias[hh]);
                b.g[i] = -exp(w.a_log[hh]) * dt;
                for (vv, xv) in b.v[i * p..][..p].iter_mut().zip(&xr[hh * p..][..p]) {
                    *vv = xv * dt;
                }
                if let Some(ls) = w.lambda_scale {
                    for l in 0..nl {
                        let j = hh * nl + l;
                        b.lam[i * cols + l] = softplus(ls[j] * dl[j]);
                    }
                }
            }
        }
        b
    });
    let ScanBlock {
        q, k, v, g, lam, ..
    } = ScanBlock::concat(blocks);
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
    par::for_row_blocks(threads, &mut y, di, PROJ_ROWS, |row, block| {
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
        short_conv(
            threads, &pre, n, 0, t_len, cw, None, width, &mut post, state,
        );
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
    par::for_row_blocks(threads, &mut q, dk, PROJ_ROWS, |_, block| {
        for qh in block.chunks_exact_mut(dk) {
            l2norm_in_place(qh);
            qh.iter_mut().for_each(|x| *x *= q_scale);
        }
    });
    par::for_row_blocks(threads, &mut k, dk, PROJ_ROWS, |_, block| {
        block.chunks_exact_mut(dk).for_each(l2norm_in_place);
    });
    let blocks = per_token_block(threads, t_len, |range| {
        let nt = range.len();
        let mut blk = ScanBlock {
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            g: vec![0.0f32; nt * hc],
            beta: vec![0.0f32; nt * hc],
            lam: vec![1.0f32; nt * hc * cols],
        };
        for (r, t) in range.enumerate() {
            for hh in 0..hc {
                let (i, ti) = (r * hc + hh, t * hc + hh);
                blk.beta[i] = sigmoid(b[ti]);
                blk.g[i] = -exp(w.a_log[hh]) * softplus(a[ti] + w.dt_bias[hh]);
                if let Some(ls) = w.lambda_scale {
                    for l in 0..nl {
                        let j = hh * nl + l;
                        blk.lam[i * cols + l] = softplus(ls[j] * l_in[t * hc * nl + j]) * lam_scale;
                    }
                }
            }
        }
        blk
    });
    let ScanBlock { g, beta, lam, .. } = ScanBlock::concat(blocks);
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
    par::for_row_blocks(threads, &mut o, dv, PROJ_ROWS * hc, |row, block| {
        for (r, orow) in block.chunks_exact_mut(dv).enumerate() {
            rmsnorm_in_place(orow, w.o_norm, c.norm_eps);
            for (ov, gv) in orow.iter_mut().zip(&gate[(row + r) * dv..][..dv]) {
                *ov *= silu(*gv);
            }
        }
    });
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
