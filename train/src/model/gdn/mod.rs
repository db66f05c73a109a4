//! The training graph of a whole Gated DeltaNet language model (log-linear, official
//! `h_gated_deltanet`, or plain, fla `gated_deltanet`) on the GPU: the forward with every
//! activation its backward needs kept, the cross-entropy against the next token, and the
//! backward of every op, adding parameter gradients.
//!
//! The maths is the runtime's (`loglinear_runtime::layers::gdn`, spec §6.2): embedding → per
//! layer [attn_norm → q/k/v projections → short causal conv (no bias) + SiLU → q, k l2norm,
//! q·dk^-½ → β = sigmoid(b_proj x), g = −exp(A_log)·softplus(a_proj x + dt_bias),
//! λ = softplus(L ⊙ l_proj x)·√dk (plain: λ = 1) → operator → per-head RMSNorm(o)·o_norm ⊙
//! SiLU(g_proj x) → o_proj → residual; mlp_norm → SwiGLU → residual] → norm → lm_head.
//!
//! Batching: B windows of T tokens are laid out in (t, b) row order (token-major, batch-minor),
//! row r = t·B + b. The operator then sees B·H heads `[T][B·H][d]` with no copies, and the short
//! conv's previous token of row r is row r − B. The operator runs with exact levels
//! (bitlen(T − 1) + 1, no saturated top level) so that its backward is exact; plain models pass
//! λ = 1 in as many columns.
//!
//! Memory: every block keeps its activations (about N·(5D + 3·conv channels + 2·key_dim +
//! 6·value_dim + 3·I) floats for N = B·T rows); one forward scan and one operator backward, with
//! their scratch, serve all blocks (the block's operator inputs are copied into shared buffers
//! first). Gradient scratch is shared by all blocks. Everything is recorded once in
//! [`GdnTrainModel::new`]; encoding only records dispatches and copies.

use crate::model::shared::f32_bytes;
use crate::model::skeleton::{SkeletonParts, SkeletonSteps, WindowBuffers};
use crate::model::{Blocks, Stage, StageMark, TrainModel};
use crate::model::{GraphOptions, InitRng};
use loglinear_host_gpu::chunk_scan::{ChunkScan, Form, ScanIo, ScanKernels, ScanShape};
use loglinear_host_gpu::gpu::{Gpu, GpuError, Rows};
use loglinear_host_gpu::grad::OpGradIo;
use loglinear_host_gpu::train::head::head_capacity;
use loglinear_host_gpu::train::kernels::{
    encode_all, ConvShape, EmbedShape, GateIo, GateShape, GateSiluGradIo, LinearGradIo,
    LinearShape, NormGrads, NormIo, QkvIo, QkvShape, Step, TrainKernels,
};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;
use loglinear_runtime::{exact_levels, Arch, ModelConfig, LAMBDA_LEVELS};

mod blocks;
use blocks::*;

/// The Gated DeltaNet blocks of a [`GdnTrainModel`]: their parameters, activations, recorded
/// steps, and the operator's forward scan and backward that all blocks share.
pub struct GdnBlocks {
    blocks: Vec<BlockParams>,
    steps: Vec<BlockSteps>,
    // Kept alive for the bind groups.
    acts: Vec<BlockActs>,
    op: OperatorIo,
    scan: ChunkScan,
    op_bwd: OpBackward,
    _xs: Vec<wgpu::Buffer>,
    _grads: GradScratch,
    _other: Vec<wgpu::Buffer>,
}

/// A GDN language model set up for training on B windows of T tokens.
pub type GdnTrainModel = TrainModel<GdnBlocks>;

impl GdnTrainModel {
    /// Allocates parameters (uninitialised: call [`GdnTrainModel::init_params`] or
    /// [`GdnTrainModel::load_params`]), activations and gradient scratch for `batch` windows of
    /// `seq_len` tokens, and records every step. GDN architectures only.
    pub fn new(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
    ) -> Result<Self, GpuError> {
        Self::with_options(gpu, config, batch, seq_len, GraphOptions::default())
    }

    /// [`GdnTrainModel::new`] with training-only choices (a tied LM head, the initialisation).
    pub fn with_options(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
        options: GraphOptions,
    ) -> Result<Self, GpuError> {
        let c = *config;
        if !matches!(c.arch, Arch::LogLinearGatedDeltaNet | Arch::GatedDeltaNet) {
            return Err(GpuError::Invalid(format!(
                "GdnTrainModel trains Gated DeltaNet models, not {}",
                c.arch.name()
            )));
        }
        c.validate()
            .map_err(|e| GpuError::Invalid(format!("model config: {e}")))?;
        if batch == 0 || seq_len == 0 {
            return Err(GpuError::Invalid("batch and seq_len must be ≥ 1".into()));
        }
        let ll = c.arch.is_log_linear();
        let levels = exact_levels(seq_len as u64);
        if ll && levels > LAMBDA_LEVELS {
            return Err(GpuError::Invalid(format!(
                "seq_len {seq_len} needs {levels} levels, over the model's {LAMBDA_LEVELS}"
            )));
        }
        let lambda_cols = if ll { LAMBDA_LEVELS } else { levels };
        let (d, h, dk, dv) = (c.hidden_size, c.num_heads, c.head_k_dim, c.head_v_dim);
        let (kd, vd, ch, im, w) = (
            c.key_dim(),
            c.d_inner(),
            c.conv_channels(),
            c.intermediate_size,
            c.conv_kernel,
        );
        let vocab = c.vocab_size;
        let n = batch * seq_len;
        // Before allocating anything: a bad head capacity fails fast.
        head_capacity(options.head_rows, n)?;
        let abl_stride = 2 * h + if ll { LAMBDA_LEVELS * h } else { 0 };
        let pw = 2 * h + LAMBDA_LEVELS * h;

        // Parameters, official keys and shapes.
        let mut params = Vec::new();
        let mut add = |name: String, shape: Vec<usize>, decay: bool| -> Result<usize, GpuError> {
            let len: usize = shape.iter().product();
            params.push(Param {
                value: gpu.storage_zeroed(&name, f32_bytes(len))?,
                grad: gpu.storage_zeroed(&format!("{name}.grad"), f32_bytes(len))?,
                name,
                shape,
                len,
                decay,
            });
            Ok(params.len() - 1)
        };
        let embedding = add("model.embeddings.weight".into(), vec![vocab, d], true)?;
        let mut blocks = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let p = |s: &str| format!("model.layers.{l}.{s}");
            blocks.push(BlockParams {
                attn_norm: add(p("attn_norm.weight"), vec![d], false)?,
                q_proj: add(p("attn.q_proj.weight"), vec![kd, d], true)?,
                k_proj: add(p("attn.k_proj.weight"), vec![kd, d], true)?,
                v_proj: add(p("attn.v_proj.weight"), vec![vd, d], true)?,
                a_proj: add(p("attn.a_proj.weight"), vec![h, d], true)?,
                b_proj: add(p("attn.b_proj.weight"), vec![h, d], true)?,
                l_proj: if ll {
                    Some(add(
                        p("attn.l_proj.weight"),
                        vec![LAMBDA_LEVELS * h, d],
                        true,
                    )?)
                } else {
                    None
                },
                g_proj: add(p("attn.g_proj.weight"), vec![vd, d], true)?,
                o_proj: add(p("attn.o_proj.weight"), vec![d, vd], true)?,
                q_conv: add(p("attn.q_conv1d.weight"), vec![kd, 1, w], true)?,
                k_conv: add(p("attn.k_conv1d.weight"), vec![kd, 1, w], true)?,
                v_conv: add(p("attn.v_conv1d.weight"), vec![vd, 1, w], true)?,
                a_log: add(p("attn.A_log"), vec![h], false)?,
                dt_bias: add(p("attn.dt_bias"), vec![h], false)?,
                l_scale: if ll {
                    Some(add(p("attn.L"), vec![h, LAMBDA_LEVELS], false)?)
                } else {
                    None
                },
                o_norm: add(p("attn.o_norm.weight"), vec![dv], false)?,
                mlp_norm: add(p("mlp_norm.weight"), vec![d], false)?,
                gate: add(p("mlp.gate_proj.weight"), vec![im, d], true)?,
                up: add(p("mlp.up_proj.weight"), vec![im, d], true)?,
                down: add(p("mlp.down_proj.weight"), vec![d, im], true)?,
            });
        }
        let final_norm = add("model.norm.weight".into(), vec![d], false)?;
        // A tied head reads (and adds its gradient into) the embedding.
        let lm_head = if options.tie_embeddings {
            embedding
        } else {
            add("lm_head.weight".into(), vec![vocab, d], true)?
        };

        let z = |label: &str, len: usize| gpu.storage_zeroed(label, f32_bytes(len));
        let windows = WindowBuffers::new(gpu, batch, seq_len)?;
        let xs: Vec<wgpu::Buffer> = (0..=c.num_layers)
            .map(|l| z(&format!("x{l}"), n * d))
            .collect::<Result<_, _>>()?;
        let mut acts = Vec::with_capacity(c.num_layers);
        for _ in 0..c.num_layers {
            acts.push(BlockActs {
                rstd1: z("rstd1", n)?,
                h1: z("h1", n * d)?,
                proj: z("proj", n * ch)?,
                conv_pre: z("conv_pre", n * ch)?,
                conv_out: z("conv_out", n * ch)?,
                q: z("q", n * kd)?,
                k: z("k", n * kd)?,
                v: z("v", n * vd)?,
                beta: z("beta", n * h)?,
                g: z("g", n * h)?,
                lam: z("lam", n * h * lambda_cols)?,
                abl: z("abl", n * abl_stride)?,
                gp: z("gp", n * vd)?,
                o: z("o", n * vd)?,
                rstd_o: z("rstd_o", n * h)?,
                y: z("y", n * vd)?,
                yg: z("yg", n * vd)?,
                x_mid: z("x_mid", n * d)?,
                rstd2: z("rstd2", n)?,
                h2: z("h2", n * d)?,
                mg: z("mg", n * im)?,
                mu: z("mu", n * im)?,
                act: z("act", n * im)?,
            });
        }
        let gs = GradScratch {
            dx: z("dx", n * d)?,
            dh: z("dh", n * d)?,
            dact: z("dact", n * im)?,
            dmg: z("dmg", n * im)?,
            dmu: z("dmu", n * im)?,
            dyg: z("dyg", n * vd)?,
            dy: z("dy", n * vd)?,
            dgp: z("dgp", n * vd)?,
            d_o: z("d_o", n * vd)?,
            dq: z("dq", n * kd)?,
            dk: z("dk", n * kd)?,
            dv: z("dv", n * vd)?,
            dg: z("dg", n * h)?,
            dbeta: z("dbeta", n * h)?,
            dlam: z("dlam", n * h * lambda_cols)?,
            dabl: z("dabl", n * abl_stride)?,
            dconv_out: z("dconv_out", n * ch)?,
            dproj: z("dproj", n * ch)?,
            wrow: z("wrow", n * d.max(vd))?,
            prow: z("prow", n * pw)?,
        };
        let mix_out = z("mixer out", n * d)?;
        let mlp_out = z("mlp out", n * d)?;
        let state = z("scan state", levels * batch * h * dk * dv)?;
        let unused = z("unused", 1)?;

        let k = TrainKernels::new(gpu)?;
        let scan_kernels = ScanKernels::new(gpu, Form::Gdn)?;
        let shape = ScanShape {
            form: Form::Gdn,
            t: seq_len,
            heads: batch * h,
            qk_heads: batch * h,
            dk,
            dv,
            lambda_cols,
            levels,
        };
        let op = OperatorIo {
            q: z("op q", n * kd)?,
            k: z("op k", n * kd)?,
            v: z("op v", n * vd)?,
            g: z("op g", n * h)?,
            beta: z("op beta", n * h)?,
            lam: z("op lam", n * h * lambda_cols)?,
            o: z("op o", n * vd)?,
        };
        let scan = ChunkScan::new(
            gpu,
            &scan_kernels,
            shape,
            ScanIo {
                q: &op.q,
                k: &op.k,
                v: &op.v,
                g: &op.g,
                beta: &op.beta,
                lam: &op.lam,
                o: &op.o,
                state: &state,
            },
        )?;
        let op_bwd = OpBackward::new(
            gpu,
            shape,
            OpGradIo {
                q: &op.q,
                k: &op.k,
                v: &op.v,
                g: &op.g,
                beta: &op.beta,
                lam: &op.lam,
                d_o: &gs.d_o,
                dq: &gs.dq,
                dk: &gs.dk,
                dv: &gs.dv,
                dg: &gs.dg,
                dbeta: &gs.dbeta,
                dlam: &gs.dlam,
            },
        )?;
        let eps = c.norm_eps;
        let pv = |i: usize| &params[i].value;
        let pg = |i: usize| &params[i].grad;

        let embed_shape = EmbedShape {
            seq_len,
            batch,
            d,
            vocab,
        };
        let embed = k.embed(gpu, &windows.tokens, pv(embedding), &xs[0], embed_shape)?;
        let mut steps = Vec::with_capacity(c.num_layers);
        for (l, (bp, a)) in blocks.iter().zip(&acts).enumerate() {
            let (x_in, x_out) = (&xs[l], &xs[l + 1]);
            let conv_shape = |c0: usize, channels: usize| ConvShape {
                rows: n,
                batch,
                stride: ch,
                c0,
                channels,
                width: w,
            };
            let convs = [
                (bp.q_conv, 0, kd),
                (bp.k_conv, kd, kd),
                (bp.v_conv, 2 * kd, vd),
            ];
            let gate_shape = GateShape {
                rows: n,
                heads: h,
                lambda_cols,
                abl_stride,
                log_linear: ll,
                dk,
                levels,
            };
            let l_scale = bp.l_scale.map_or(&unused, |i| pv(i));
            let linear = |in_dim, out_dim| LinearShape {
                rows: n,
                in_dim,
                out_dim,
            };
            let qkv_shape = QkvShape {
                rows: n,
                heads: h,
                dk,
                dv,
            };
            let h1 = Rows::new(&a.h1, 0, d);
            let proj = |off| Rows::new(&a.proj, off, ch);
            let abl = |off| Rows::new(&a.abl, off, abl_stride);
            let attn_norm = NormIo {
                x: x_in,
                w: pv(bp.attn_norm),
                out: &a.h1,
                rstd: &a.rstd1,
            };
            let o_norm = NormIo {
                x: &a.o,
                w: pv(bp.o_norm),
                out: &a.y,
                rstd: &a.rstd_o,
            };
            let mlp_norm = NormIo {
                x: &a.x_mid,
                w: pv(bp.mlp_norm),
                out: &a.h2,
                rstd: &a.rstd2,
            };
            // Forward, before the operator.
            let mut before = vec![
                k.rmsnorm(gpu, attn_norm, n, d, eps)?,
                k.linear(gpu, linear(d, kd), h1, pv(bp.q_proj), proj(0))?,
                k.linear(gpu, linear(d, kd), h1, pv(bp.k_proj), proj(kd))?,
                k.linear(gpu, linear(d, vd), h1, pv(bp.v_proj), proj(2 * kd))?,
            ];
            for &(wi, c0, cn) in &convs {
                before.push(k.conv(
                    gpu,
                    &a.proj,
                    pv(wi),
                    &a.conv_pre,
                    &a.conv_out,
                    conv_shape(c0, cn),
                )?);
            }
            let qkv_io = QkvIo {
                x: &a.conv_out,
                dx: &gs.dconv_out,
                q: &a.q,
                k: &a.k,
                v: &a.v,
            };
            before.push(k.qkv(gpu, qkv_io, qkv_shape, false)?);
            before.push(k.linear(gpu, linear(d, h), h1, pv(bp.a_proj), abl(0))?);
            before.push(k.linear(gpu, linear(d, h), h1, pv(bp.b_proj), abl(h))?);
            if let Some(lp) = bp.l_proj {
                let l_shape = linear(d, LAMBDA_LEVELS * h);
                before.push(k.linear(gpu, l_shape, h1, pv(lp), abl(2 * h))?);
            }
            before.push(k.gates(
                gpu,
                GateIo {
                    abl: &a.abl,
                    dt_bias: pv(bp.dt_bias),
                    a_log: pv(bp.a_log),
                    l_scale,
                    beta: &a.beta,
                    g: &a.g,
                    lam: &a.lam,
                    dabl: &gs.dabl,
                    prow: &gs.prow,
                },
                gate_shape,
                false,
            )?);
            let gp = Rows::new(&a.gp, 0, vd);
            before.push(k.linear(gpu, linear(d, vd), h1, pv(bp.g_proj), gp)?);
            // Forward, after the operator: output norm and gate, o_proj, residual, MLP.
            let (yg, h2, act) = (
                Rows::new(&a.yg, 0, vd),
                Rows::new(&a.h2, 0, d),
                Rows::new(&a.act, 0, im),
            );
            let (mix_rows, mlp_rows) = (Rows::new(&mix_out, 0, d), Rows::new(&mlp_out, 0, d));
            let after = vec![
                k.rmsnorm(gpu, o_norm, n * h, dv, eps)?,
                k.gate_silu(gpu, &a.y, &a.gp, &a.yg, n * vd)?,
                k.linear(gpu, linear(vd, d), yg, pv(bp.o_proj), mix_rows)?,
                k.add(gpu, x_in, &mix_out, &a.x_mid, n * d)?,
                k.rmsnorm(gpu, mlp_norm, n, d, eps)?,
                k.linear(gpu, linear(d, im), h2, pv(bp.gate), Rows::new(&a.mg, 0, im))?,
                k.linear(gpu, linear(d, im), h2, pv(bp.up), Rows::new(&a.mu, 0, im))?,
                k.gate_silu(gpu, &a.mu, &a.mg, &a.act, n * im)?,
                k.linear(gpu, linear(im, d), act, pv(bp.down), mlp_rows)?,
                k.add(gpu, &a.x_mid, &mlp_out, x_out, n * d)?,
            ];

            // Backward, top down. gs.dx holds dL/d x_out on entry.
            let mut bwd_after = Vec::new();
            let (dh, wrow) = (Rows::new(&gs.dh, 0, d), &gs.wrow);
            bwd_after.extend(k.linear_backward(
                gpu,
                linear(im, d),
                LinearGradIo {
                    x: act,
                    w: pv(bp.down),
                    dw: pg(bp.down),
                    dy: Rows::new(&gs.dx, 0, d),
                    dx: Rows::new(&gs.dact, 0, im),
                    accumulate_dx: false,
                },
            )?);
            let swiglu = GateSiluGradIo {
                a: &a.mu,
                b: &a.mg,
                dout: &gs.dact,
                da: &gs.dmu,
                db: &gs.dmg,
            };
            bwd_after.push(k.gate_silu_backward(gpu, swiglu, n * im)?);
            for (wi, dy, accumulate_dx) in [(bp.gate, &gs.dmg, false), (bp.up, &gs.dmu, true)] {
                bwd_after.extend(k.linear_backward(
                    gpu,
                    linear(d, im),
                    LinearGradIo {
                        x: h2,
                        w: pv(wi),
                        dw: pg(wi),
                        dy: Rows::new(dy, 0, im),
                        dx: dh,
                        accumulate_dx,
                    },
                )?);
            }
            let into_dx = NormGrads {
                dy: &gs.dh,
                dx: &gs.dx,
                wrow,
            };
            bwd_after.push(k.rmsnorm_backward(gpu, mlp_norm, into_dx, n, d, true)?);
            bwd_after.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, d), n, d, pg(bp.mlp_norm))?);
            // gs.dx now holds dL/d x_mid.
            bwd_after.extend(k.linear_backward(
                gpu,
                linear(vd, d),
                LinearGradIo {
                    x: yg,
                    w: pv(bp.o_proj),
                    dw: pg(bp.o_proj),
                    dy: Rows::new(&gs.dx, 0, d),
                    dx: Rows::new(&gs.dyg, 0, vd),
                    accumulate_dx: false,
                },
            )?);
            let output_gate = GateSiluGradIo {
                a: &a.y,
                b: &a.gp,
                dout: &gs.dyg,
                da: &gs.dy,
                db: &gs.dgp,
            };
            bwd_after.push(k.gate_silu_backward(gpu, output_gate, n * vd)?);
            let into_d_o = NormGrads {
                dy: &gs.dy,
                dx: &gs.d_o,
                wrow,
            };
            bwd_after.push(k.rmsnorm_backward(gpu, o_norm, into_d_o, n * h, dv, false)?);
            bwd_after.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, dv), n * h, dv, pg(bp.o_norm))?);
            let mut bwd_before = vec![k.gates(
                gpu,
                GateIo {
                    abl: &a.abl,
                    dt_bias: pv(bp.dt_bias),
                    a_log: pv(bp.a_log),
                    l_scale,
                    beta: &gs.dbeta,
                    g: &gs.dg,
                    lam: &gs.dlam,
                    dabl: &gs.dabl,
                    prow: &gs.prow,
                },
                gate_shape,
                true,
            )?];
            bwd_before.push(k.colsum(gpu, Rows::new(&gs.prow, 0, pw), n, h, pg(bp.a_log))?);
            bwd_before.push(k.colsum(gpu, Rows::new(&gs.prow, h, pw), n, h, pg(bp.dt_bias))?);
            if let Some(li) = bp.l_scale {
                bwd_before.push(k.colsum(
                    gpu,
                    Rows::new(&gs.prow, 2 * h, pw),
                    n,
                    LAMBDA_LEVELS * h,
                    pg(li),
                )?);
            }
            let qkv_grads = QkvIo {
                q: &gs.dq,
                k: &gs.dk,
                v: &gs.dv,
                ..qkv_io
            };
            bwd_before.push(k.qkv(gpu, qkv_grads, qkv_shape, true)?);
            for &(wi, c0, cn) in &convs {
                let s = conv_shape(c0, cn);
                bwd_before.push(k.conv_backward(
                    gpu,
                    &a.conv_pre,
                    &gs.dconv_out,
                    pv(wi),
                    &gs.dproj,
                    s,
                )?);
                bwd_before.push(k.conv_backward_w(
                    gpu,
                    &a.conv_pre,
                    &gs.dconv_out,
                    &a.proj,
                    pg(wi),
                    s,
                )?);
            }
            // The seven projections of h1, their input gradients summed into dh.
            let mut projections = vec![
                (bp.q_proj, kd, &gs.dproj, 0, ch),
                (bp.k_proj, kd, &gs.dproj, kd, ch),
                (bp.v_proj, vd, &gs.dproj, 2 * kd, ch),
                (bp.a_proj, h, &gs.dabl, 0, abl_stride),
                (bp.b_proj, h, &gs.dabl, h, abl_stride),
                (bp.g_proj, vd, &gs.dgp, 0, vd),
            ];
            if let Some(lp) = bp.l_proj {
                projections.push((lp, LAMBDA_LEVELS * h, &gs.dabl, 2 * h, abl_stride));
            }
            for (i, &(wi, out_dim, dy, off, stride)) in projections.iter().enumerate() {
                bwd_before.extend(k.linear_backward(
                    gpu,
                    linear(d, out_dim),
                    LinearGradIo {
                        x: h1,
                        w: pv(wi),
                        dw: pg(wi),
                        dy: Rows::new(dy, off, stride),
                        dx: dh,
                        accumulate_dx: i > 0,
                    },
                )?);
            }
            bwd_before.push(k.rmsnorm_backward(gpu, attn_norm, into_dx, n, d, true)?);
            bwd_before.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, d), n, d, pg(bp.attn_norm))?);
            steps.push(BlockSteps {
                before_scan: before,
                after_scan: after,
                bwd_after,
                bwd_before,
            });
        }
        let parts = SkeletonParts {
            config: c,
            options,
            batch,
            seq_len,
            levels,
            lambda_cols,
            params,
            embedding,
            final_norm,
            lm_head,
            windows,
            embed,
        };
        let skeleton_steps = SkeletonSteps::record(gpu, &k, &parts, &xs[c.num_layers], &gs.dx)?;
        let mixer = GdnBlocks {
            blocks,
            steps,
            acts,
            op,
            scan,
            op_bwd,
            _xs: xs,
            _grads: gs,
            _other: vec![mix_out, mlp_out, state, unused],
        };
        Ok(Self::assemble(gpu, parts, skeleton_steps, mixer))
    }
}
