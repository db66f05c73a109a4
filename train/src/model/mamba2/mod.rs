//! The training graph of a whole Mamba-2 language model (log-linear, official `hattention` /
//! fla `log_linear_mamba2`, or plain, official `mamba2mlp`) on the GPU: the forward with every
//! activation its backward needs kept, the cross-entropy against the next token, and the
//! backward of every op, adding parameter gradients. The API and its semantics are those of
//! [`crate::model::gdn::GdnTrainModel`].
//!
//! The maths is the runtime's (`loglinear_runtime::layers::mamba2`, spec §6.1): embedding →
//! per layer [mixer_norm → in_proj, split z | xBC | dt | dl → causal conv (+ bias) + SiLU,
//! split x | B | C → dt = softplus(dt + dt_bias), g = −exp(A_log)·dt, λ = softplus(L ⊙ dl)
//! (plain: λ = 1) → operator with q = C, k = B (copied per head), v = x·dt → y = o + D·x →
//! RMSNorm(y ⊙ SiLU(z))·w → out_proj → residual; mlp_norm → SwiGLU → residual] → norm_f →
//! lm_head.
//!
//! Batching: B windows of T tokens in (t, b) row order (row r = t·B + b), so the operator sees
//! B·H heads `[T][B·H][d]` with no copies. The operator runs with exact levels
//! (bitlen(T − 1) + 1) so that its backward is exact; plain models pass λ = 1 in as many
//! columns. The gated norm's group must be the whole d_inner (official; fla with one group).

use crate::model::shared::f32_bytes;
use crate::model::skeleton::{SkeletonParts, SkeletonSteps, WindowBuffers};
use crate::model::{Blocks, Stage, StageMark, TrainModel};
use crate::model::{GraphOptions, InitRng};
use loglinear_host_gpu::chunk_scan::{ChunkScan, Form, ScanIo, ScanKernels, ScanShape};
use loglinear_host_gpu::gpu::{Gpu, GpuError, Rows};
use loglinear_host_gpu::grad::op_m2::{M2Backward, M2Kernels};
use loglinear_host_gpu::grad::OpGradIo;
use loglinear_host_gpu::train::head::head_capacity;
use loglinear_host_gpu::train::kernels::{
    encode_all, ConvShape, EmbedShape, GateSiluGradIo, LinearGradIo, LinearShape, Matmul,
    NormGrads, NormIo, Operand, Step, TrainKernels,
};
use loglinear_host_gpu::train::mamba2_kernels::{
    M2ConvIo, M2GateGradIo, M2GateIo, M2QkvIo, M2Shape, M2TrainKernels, M2XGradIo,
};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;
use loglinear_runtime::{exact_levels, ModelConfig, LAMBDA_LEVELS};

mod blocks;
use blocks::*;

/// The Mamba-2 blocks of a [`Mamba2TrainModel`]: their parameters, activations and recorded
/// steps, each block with its own forward scan and operator backward.
pub struct Mamba2Blocks {
    blocks: Vec<BlockParams>,
    steps: Vec<BlockSteps>,
    // Kept alive for the bind groups.
    _acts: Vec<BlockActs>,
    _xs: Vec<wgpu::Buffer>,
    _grads: GradScratch,
    _op_inputs: OpInputs,
    _other: Vec<wgpu::Buffer>,
}

/// A Mamba-2 language model set up for training on B windows of T tokens.
pub type Mamba2TrainModel = TrainModel<Mamba2Blocks>;

/// A slice of rows of a linear layer's weight: rows `[row0, row0 + out_dim)` of W
/// `[rows][in_dim]` (in_proj's z, xBC and dt | dl parts).
#[derive(Clone, Copy)]
struct WeightRows<'a> {
    w: &'a wgpu::Buffer,
    dw: &'a wgpu::Buffer,
    row0: usize,
    out_dim: usize,
    in_dim: usize,
}

/// `Y[rows][out_dim] = X·W[row0..]ᵀ` (Y contiguous).
fn linear_rows(
    k: &TrainKernels,
    gpu: &Gpu,
    rows: usize,
    x: &wgpu::Buffer,
    w: WeightRows<'_>,
    y: &wgpu::Buffer,
) -> Result<Step, GpuError> {
    k.matmul(
        gpu,
        Matmul {
            m: rows,
            n: w.out_dim,
            k: w.in_dim,
            a: Operand::rows(x, 0, w.in_dim),
            b: Operand::cols(w.w, w.row0 * w.in_dim, w.in_dim),
            c: Rows::new(y, 0, w.out_dim),
            accumulate: false,
        },
    )
}

/// Where a backward writes the input gradient dX: into `dx`, added to what it holds when
/// `accumulate` (a later part of a sum), else overwriting it.
#[derive(Clone, Copy)]
struct InputGrad<'a> {
    dx: &'a wgpu::Buffer,
    accumulate: bool,
}

/// Backward of [`linear_rows`]: `dX (+)= dY·W[row0..]` and `dW[row0..] += dYᵀ·X`.
fn linear_rows_backward(
    k: &TrainKernels,
    gpu: &Gpu,
    rows: usize,
    x: &wgpu::Buffer,
    w: WeightRows<'_>,
    dy: &wgpu::Buffer,
    dx: InputGrad<'_>,
) -> Result<[Step; 2], GpuError> {
    let dx_step = k.matmul(
        gpu,
        Matmul {
            m: rows,
            n: w.in_dim,
            k: w.out_dim,
            a: Operand::rows(dy, 0, w.out_dim),
            b: Operand::rows(w.w, w.row0 * w.in_dim, w.in_dim),
            c: Rows::new(dx.dx, 0, w.in_dim),
            accumulate: dx.accumulate,
        },
    )?;
    let dw_step = k.matmul(
        gpu,
        Matmul {
            m: w.out_dim,
            n: w.in_dim,
            k: rows,
            a: Operand::cols(dy, 0, w.out_dim),
            b: Operand::rows(x, 0, w.in_dim),
            c: Rows::new(w.dw, w.row0 * w.in_dim, w.in_dim),
            accumulate: true,
        },
    )?;
    Ok([dx_step, dw_step])
}

impl Mamba2TrainModel {
    /// Allocates parameters (uninitialised: call [`Mamba2TrainModel::init_params`] or
    /// [`Mamba2TrainModel::load_params`]), activations and gradient scratch for `batch` windows
    /// of `seq_len` tokens, and records every step. Mamba-2 architectures only.
    pub fn new(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
    ) -> Result<Self, GpuError> {
        Self::with_options(gpu, config, batch, seq_len, GraphOptions::default())
    }

    /// [`Mamba2TrainModel::new`] with training-only choices (a tied LM head, the initialisation).
    pub fn with_options(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
        options: GraphOptions,
    ) -> Result<Self, GpuError> {
        let c = *config;
        if !c.arch.is_mamba2() {
            return Err(GpuError::Invalid(format!(
                "Mamba2TrainModel trains Mamba-2 models, not {}",
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
        let (d, h, ns, hp, groups) = (
            c.hidden_size,
            c.num_heads,
            c.head_k_dim,
            c.head_v_dim,
            c.num_groups,
        );
        let (di, ch, im, w) = (
            c.d_inner(),
            c.conv_channels(),
            c.intermediate_size,
            c.conv_kernel,
        );
        // Gated-norm groups per token and their size.
        let (ngroups, gsize) = (di / c.norm_group_size, c.norm_group_size);
        let vocab = c.vocab_size;
        let n = batch * seq_len;
        // Before allocating anything: a bad head capacity fails fast.
        head_capacity(options.head_rows, n)?;
        let rows_in = c.in_proj_rows();
        let ms = M2Shape {
            rows: n,
            batch,
            heads: h,
            head_dim: hp,
            groups,
            state: ns,
            lambda_cols,
            levels,
            log_linear: ll,
            conv_width: w,
        };
        let dtl_stride = ms.dtl_stride();
        let pw = ms.prow_stride();

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
        let embedding = add("backbone.embeddings.weight".into(), vec![vocab, d], true)?;
        let mut blocks = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let p = |s: &str| format!("backbone.layers.{l}.{s}");
            blocks.push(BlockParams {
                mixer_norm: add(p("mixer_norm.weight"), vec![d], false)?,
                in_proj: add(p("mixer.in_proj.weight"), vec![rows_in, d], true)?,
                conv: add(p("mixer.conv1d.weight"), vec![ch, 1, w], true)?,
                conv_bias: if c.conv_bias {
                    Some(add(p("mixer.conv1d.bias"), vec![ch], false)?)
                } else {
                    None
                },
                a_log: add(p("mixer.A_log"), vec![h], false)?,
                dt_bias: add(p("mixer.dt_bias"), vec![h], false)?,
                d_skip: add(p("mixer.D"), vec![h], false)?,
                l_scale: if ll {
                    Some(add(p("mixer.L"), vec![h, LAMBDA_LEVELS], false)?)
                } else {
                    None
                },
                norm: add(p("mixer.norm.weight"), vec![di], false)?,
                out_proj: add(p("mixer.out_proj.weight"), vec![d, di], true)?,
                mlp_norm: add(p("mlp_norm.weight"), vec![d], false)?,
                gate: add(p("mlp.gate_proj.weight"), vec![im, d], true)?,
                up: add(p("mlp.up_proj.weight"), vec![im, d], true)?,
                down: add(p("mlp.down_proj.weight"), vec![d, im], true)?,
            });
        }
        let final_norm = add("backbone.norm_f.weight".into(), vec![d], false)?;
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
                z: z("z", n * di)?,
                proj: z("proj", n * ch)?,
                dtl: z("dtl", n * dtl_stride)?,
                conv_pre: z("conv_pre", n * ch)?,
                xbc: z("xbc", n * ch)?,
                y: z("y", n * di)?,
                yg: z("yg", n * di)?,
                rstd_n: z("rstd_n", n * ngroups)?,
                yn: z("yn", n * di)?,
                x_mid: z("x_mid", n * d)?,
                rstd2: z("rstd2", n)?,
                h2: z("h2", n * d)?,
                mg: z("mg", n * im)?,
                mu: z("mu", n * im)?,
                act: z("act", n * im)?,
            });
        }
        let oi = OpInputs {
            q: z("q", n * h * ns)?,
            k: z("k", n * h * ns)?,
            v: z("v", n * di)?,
            g: z("g", n * h)?,
            dt: z("dt", n * h)?,
            lam: z("lam", n * h * lambda_cols)?,
            o: z("o", n * di)?,
        };
        let gs = GradScratch {
            dx: z("dx", n * d)?,
            dh: z("dh", n * d)?,
            dact: z("dact", n * im)?,
            dmg: z("dmg", n * im)?,
            dmu: z("dmu", n * im)?,
            dyn_: z("dyn", n * di)?,
            dyg: z("dyg", n * di)?,
            dy: z("dy", n * di)?,
            dz: z("dz", n * di)?,
            dq: z("dq", n * h * ns)?,
            dk: z("dk", n * h * ns)?,
            dv: z("dv", n * di)?,
            dg: z("dg", n * h)?,
            dlam: z("dlam", n * h * lambda_cols)?,
            sdt: z("sdt", n * h)?,
            ddtl: z("ddtl", n * dtl_stride)?,
            dxbc: z("dxbc", n * ch)?,
            dproj: z("dproj", n * ch)?,
            wrow: z("wrow", n * d.max(di))?,
            prow: z("prow", n * pw)?,
        };
        let mix_out = z("mixer out", n * d)?;
        let mlp_out = z("mlp out", n * d)?;
        let state = z("scan state", levels * batch * h * ns * hp)?;
        let unused = z("unused", 1)?;
        // The operator's β (Mamba-2 ignores it) and the conv bias of models without one.
        let no_beta = z("no beta", 1)?;
        let no_bias = z("no conv bias", ch)?;

        let k = TrainKernels::new(gpu)?;
        let mk = M2TrainKernels::new(gpu)?;
        let scan_kernels = ScanKernels::new(gpu, Form::Mamba2)?;
        let bwd_kernels = M2Kernels::new(gpu)?;
        let shape = ScanShape {
            form: Form::Mamba2,
            t: seq_len,
            heads: batch * h,
            qk_heads: batch * h,
            dk: ns,
            dv: hp,
            lambda_cols,
            levels,
        };
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
            let in_rows = |row0: usize, out_dim: usize| WeightRows {
                w: pv(bp.in_proj),
                dw: pg(bp.in_proj),
                row0,
                out_dim,
                in_dim: d,
            };
            let (w_z, w_xbc, w_dtl) = (
                in_rows(0, di),
                in_rows(di, ch),
                in_rows(di + ch, dtl_stride),
            );
            let gate_io = M2GateIo {
                dtl: &a.dtl,
                dt_bias: pv(bp.dt_bias),
                a_log: pv(bp.a_log),
                l_scale: bp.l_scale.map_or(&unused, |i| pv(i)),
            };
            let conv_bias = bp.conv_bias.map_or(&no_bias, |i| pv(i));
            let conv_shape = ConvShape {
                rows: n,
                batch,
                stride: ch,
                c0: 0,
                channels: ch,
                width: w,
            };
            let linear = |in_dim, out_dim| LinearShape {
                rows: n,
                in_dim,
                out_dim,
            };
            let mixer_norm = NormIo {
                x: x_in,
                w: pv(bp.mixer_norm),
                out: &a.h1,
                rstd: &a.rstd1,
            };
            let gated_norm = NormIo {
                x: &a.yg,
                w: pv(bp.norm),
                out: &a.yn,
                rstd: &a.rstd_n,
            };
            let mlp_norm = NormIo {
                x: &a.x_mid,
                w: pv(bp.mlp_norm),
                out: &a.h2,
                rstd: &a.rstd2,
            };
            let conv_io = M2ConvIo {
                inp: &a.proj,
                w: pv(bp.conv),
                bias: conv_bias,
                pre: &a.conv_pre,
                out: &a.xbc,
            };
            let qkv_io = M2QkvIo {
                xbc: &a.xbc,
                dt: &oi.dt,
                q: &oi.q,
                k: &oi.k,
                v: &oi.v,
            };
            // Forward, before the operator.
            let before = vec![
                k.rmsnorm(gpu, mixer_norm, n, d, eps)?,
                linear_rows(&k, gpu, n, &a.h1, w_z, &a.z)?,
                linear_rows(&k, gpu, n, &a.h1, w_xbc, &a.proj)?,
                linear_rows(&k, gpu, n, &a.h1, w_dtl, &a.dtl)?,
                mk.conv(gpu, ms, conv_io)?,
                mk.gates(gpu, ms, &gate_io, &oi.g, &oi.lam, &oi.dt)?,
                mk.qkv(gpu, ms, qkv_io)?,
            ];
            let recompute = vec![
                mk.gates(gpu, ms, &gate_io, &oi.g, &oi.lam, &oi.dt)?,
                mk.qkv(gpu, ms, qkv_io)?,
            ];
            let scan = ChunkScan::new(
                gpu,
                &scan_kernels,
                shape,
                ScanIo {
                    q: &oi.q,
                    k: &oi.k,
                    v: &oi.v,
                    g: &oi.g,
                    beta: &no_beta,
                    lam: &oi.lam,
                    o: &oi.o,
                    state: &state,
                },
            )?;
            // Forward, after the operator: skip, gated norm, out_proj, residual, MLP.
            let (yn, h2, act) = (
                Rows::new(&a.yn, 0, di),
                Rows::new(&a.h2, 0, d),
                Rows::new(&a.act, 0, im),
            );
            let (mix_rows, mlp_rows) = (Rows::new(&mix_out, 0, d), Rows::new(&mlp_out, 0, d));
            let after = vec![
                mk.skip(gpu, ms, &oi.o, &a.xbc, pv(bp.d_skip), &a.y)?,
                k.gate_silu(gpu, &a.y, &a.z, &a.yg, n * di)?,
                mk.group_norm(gpu, gated_norm, n * ngroups, gsize, ngroups, eps)?,
                k.linear(gpu, linear(di, d), yn, pv(bp.out_proj), mix_rows)?,
                k.add(gpu, x_in, &mix_out, &a.x_mid, n * d)?,
                k.rmsnorm(gpu, mlp_norm, n, d, eps)?,
                k.linear(gpu, linear(d, im), h2, pv(bp.gate), Rows::new(&a.mg, 0, im))?,
                k.linear(gpu, linear(d, im), h2, pv(bp.up), Rows::new(&a.mu, 0, im))?,
                k.gate_silu(gpu, &a.mu, &a.mg, &a.act, n * im)?,
                k.linear(gpu, linear(im, d), act, pv(bp.down), mlp_rows)?,
                k.add(gpu, &a.x_mid, &mlp_out, x_out, n * d)?,
            ];

            // Backward, top down. gs.dx holds dL/d x_out on entry.
            let mut bwd_after: Vec<Step> = Vec::new();
            let shared = |v: &mut Vec<Step>, s: [Step; 2]| v.extend(s);
            shared(
                &mut bwd_after,
                k.linear_backward(
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
                )?,
            );
            let swiglu = GateSiluGradIo {
                a: &a.mu,
                b: &a.mg,
                dout: &gs.dact,
                da: &gs.dmu,
                db: &gs.dmg,
            };
            bwd_after.push(k.gate_silu_backward(gpu, swiglu, n * im)?);
            for (wi, dy, acc) in [(bp.gate, &gs.dmg, false), (bp.up, &gs.dmu, true)] {
                shared(
                    &mut bwd_after,
                    k.linear_backward(
                        gpu,
                        linear(d, im),
                        LinearGradIo {
                            x: h2,
                            w: pv(wi),
                            dw: pg(wi),
                            dy: Rows::new(dy, 0, im),
                            dx: Rows::new(&gs.dh, 0, d),
                            accumulate_dx: acc,
                        },
                    )?,
                );
            }
            let into_dx = NormGrads {
                dy: &gs.dh,
                dx: &gs.dx,
                wrow: &gs.wrow,
            };
            bwd_after.push(k.rmsnorm_backward(gpu, mlp_norm, into_dx, n, d, true)?);
            bwd_after.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, d), n, d, pg(bp.mlp_norm))?);
            // gs.dx now holds dL/d x_mid.
            shared(
                &mut bwd_after,
                k.linear_backward(
                    gpu,
                    linear(di, d),
                    LinearGradIo {
                        x: yn,
                        w: pv(bp.out_proj),
                        dw: pg(bp.out_proj),
                        dy: Rows::new(&gs.dx, 0, d),
                        dx: Rows::new(&gs.dyn_, 0, di),
                        accumulate_dx: false,
                    },
                )?,
            );
            let into_dyg = NormGrads {
                dy: &gs.dyn_,
                dx: &gs.dyg,
                wrow: &gs.wrow,
            };
            bwd_after.push(mk.group_norm_backward(
                gpu,
                gated_norm,
                into_dyg,
                n * ngroups,
                gsize,
                ngroups,
            )?);
            bwd_after.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, di), n, di, pg(bp.norm))?);
            let output_gate = GateSiluGradIo {
                a: &a.y,
                b: &a.z,
                dout: &gs.dyg,
                da: &gs.dy,
                db: &gs.dz,
            };
            bwd_after.push(k.gate_silu_backward(gpu, output_gate, n * di)?);
            // d_o = dy (y = o + D·x).
            let op_bwd = M2Backward::with_kernels(
                gpu,
                &bwd_kernels,
                shape,
                OpGradIo {
                    q: &oi.q,
                    k: &oi.k,
                    v: &oi.v,
                    g: &oi.g,
                    beta: &no_beta,
                    lam: &oi.lam,
                    d_o: &gs.dy,
                    dq: &gs.dq,
                    dk: &gs.dk,
                    dv: &gs.dv,
                    dg: &gs.dg,
                    dbeta: &no_beta,
                    dlam: &gs.dlam,
                },
            )?;
            let x_grads = M2XGradIo {
                xbc: &a.xbc,
                dt: &oi.dt,
                d_skip: pv(bp.d_skip),
                dy: &gs.dy,
                dv: &gs.dv,
                dxbc: &gs.dxbc,
                sdt: &gs.sdt,
                prow: &gs.prow,
            };
            let gate_grads = M2GateGradIo {
                dg: &gs.dg,
                dlam: &gs.dlam,
                sdt: &gs.sdt,
                ddtl: &gs.ddtl,
                prow: &gs.prow,
            };
            let mut bwd_before = vec![
                mk.x_backward(gpu, ms, x_grads)?,
                mk.gates_backward(gpu, ms, &gate_io, gate_grads)?,
                mk.bc_backward(gpu, ms, &gs.dq, &gs.dk, &gs.dxbc)?,
                k.colsum(gpu, Rows::new(&gs.prow, 0, pw), n, h, pg(bp.a_log))?,
                k.colsum(gpu, Rows::new(&gs.prow, h, pw), n, h, pg(bp.dt_bias))?,
                k.colsum(gpu, Rows::new(&gs.prow, 2 * h, pw), n, h, pg(bp.d_skip))?,
            ];
            if let Some(li) = bp.l_scale {
                bwd_before.push(k.colsum(
                    gpu,
                    Rows::new(&gs.prow, 3 * h, pw),
                    n,
                    LAMBDA_LEVELS * h,
                    pg(li),
                )?);
            }
            bwd_before.push(k.conv_backward(
                gpu,
                &a.conv_pre,
                &gs.dxbc,
                pv(bp.conv),
                &gs.dproj,
                conv_shape,
            )?);
            bwd_before.push(k.conv_backward_w(
                gpu,
                &a.conv_pre,
                &gs.dxbc,
                &a.proj,
                pg(bp.conv),
                conv_shape,
            )?);
            if let Some(bi) = bp.conv_bias {
                bwd_before.push(mk.conv_bias_backward(gpu, ms, &a.conv_pre, &gs.dxbc, pg(bi))?);
            }
            // in_proj's three row blocks, their input gradients summed into dh.
            for (i, (wr, dy)) in [(w_z, &gs.dz), (w_xbc, &gs.dproj), (w_dtl, &gs.ddtl)]
                .into_iter()
                .enumerate()
            {
                let dh = InputGrad {
                    dx: &gs.dh,
                    accumulate: i > 0,
                };
                shared(
                    &mut bwd_before,
                    linear_rows_backward(&k, gpu, n, &a.h1, wr, dy, dh)?,
                );
            }
            bwd_before.push(k.rmsnorm_backward(gpu, mixer_norm, into_dx, n, d, true)?);
            bwd_before.push(k.colsum(gpu, Rows::new(&gs.wrow, 0, d), n, d, pg(bp.mixer_norm))?);
            steps.push(BlockSteps {
                before_scan: before,
                scan,
                after_scan: after,
                bwd_after,
                recompute,
                op_bwd,
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
        let mixer = Mamba2Blocks {
            blocks,
            steps,
            _acts: acts,
            _xs: xs,
            _grads: gs,
            _op_inputs: oi,
            _other: vec![mix_out, mlp_out, state, unused, no_beta, no_bias],
        };
        Ok(Self::assemble(gpu, parts, skeleton_steps, mixer))
    }
}
