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

use crate::model::init::InitRng;
use crate::model::layer::{Build, Dims, Keys, LayerActs, Mixer, MixerSteps};
use crate::model::operator::OperatorBuffers;
use crate::model::shared::ParamList;
use crate::model::skeleton::TrainModel;
use loglinear_host_gpu::chunk_scan::{ChunkScan, Form, ScanKernels};
use loglinear_host_gpu::gpu::{GpuError, Rows};
use loglinear_host_gpu::grad::op_m2::{M2Backward, M2Kernels};
use loglinear_host_gpu::train::kernels::{
    encode_all, ConvShape, GateSiluGradIo, Matmul, NormGrads, NormIo, Operand, Step,
};
use loglinear_host_gpu::train::mamba2_kernels::{
    M2ConvIo, M2GateGradIo, M2GateIo, M2QkvIo, M2Shape, M2TrainKernels, M2XGradIo,
};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;
use loglinear_runtime::{Arch, LAMBDA_LEVELS};

mod blocks;
use blocks::*;

/// The Mamba-2 mixers of a [`Mamba2TrainModel`]: each block's operator (its forward scan, the
/// recomputation of its inputs, its backward), and the buffers their steps use. The
/// operator's inputs are cheap to recompute from the kept conv output and dt | dl rows, so
/// the backward recomputes them into the one set of operator buffers instead of every block
/// keeping its own (q and k are per-head copies of B and C, H times their size).
pub struct Mamba2Mixer {
    ops: Vec<BlockOperator>,
    // Kept alive for the bind groups.
    _acts: Vec<MixerActs>,
    _grads: GradScratch,
    _op: OperatorBuffers,
    _other: Vec<wgpu::Buffer>,
}

/// A Mamba-2 language model set up for training on B windows of T tokens.
pub type Mamba2TrainModel = TrainModel<Mamba2Mixer>;

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

/// `Y[rows][out_dim] = X·W[row0..]ᵀ` over every row (Y contiguous).
fn linear_rows(
    b: &Build<'_>,
    x: &wgpu::Buffer,
    w: WeightRows<'_>,
    y: &wgpu::Buffer,
) -> Result<Step, GpuError> {
    b.k.matmul(
        b.gpu,
        Matmul {
            m: b.dims.rows,
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
    b: &Build<'_>,
    x: &wgpu::Buffer,
    w: WeightRows<'_>,
    dy: &wgpu::Buffer,
    dx: InputGrad<'_>,
) -> Result<[Step; 2], GpuError> {
    let rows = b.dims.rows;
    let dx_step = b.k.matmul(
        b.gpu,
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
    let dw_step = b.k.matmul(
        b.gpu,
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

impl Mixer for Mamba2Mixer {
    const INIT_SALT: u64 = 0x6d61_6d62_615f_696e;
    const KEYS: Keys = Keys {
        embedding: "backbone.embeddings.weight",
        layers: "backbone.layers",
        input_norm: "mixer_norm.weight",
        final_norm: "backbone.norm_f.weight",
    };
    const MODEL: &'static str = "Mamba2TrainModel";
    const FAMILY: &'static str = "Mamba-2";

    fn trains(arch: Arch) -> bool {
        arch.is_mamba2()
    }

    type Params = MixerParams;

    fn add_params(
        list: &mut ParamList,
        dims: &Dims,
        key: &dyn Fn(&str) -> String,
    ) -> Result<MixerParams, GpuError> {
        let c = &dims.config;
        let ll = c.arch.is_log_linear();
        let (d, h, di, ch, w) = (
            c.hidden_size,
            c.num_heads,
            c.d_inner(),
            c.conv_channels(),
            c.conv_kernel,
        );
        Ok(MixerParams {
            in_proj: list.add(key("mixer.in_proj.weight"), vec![c.in_proj_rows(), d], true)?,
            conv: list.add(key("mixer.conv1d.weight"), vec![ch, 1, w], true)?,
            conv_bias: list.add_if(c.conv_bias, key("mixer.conv1d.bias"), vec![ch], false)?,
            a_log: list.add(key("mixer.A_log"), vec![h], false)?,
            dt_bias: list.add(key("mixer.dt_bias"), vec![h], false)?,
            d_skip: list.add(key("mixer.D"), vec![h], false)?,
            l_scale: list.add_if(ll, key("mixer.L"), vec![h, LAMBDA_LEVELS], false)?,
            norm: list.add(key("mixer.norm.weight"), vec![di], false)?,
            out_proj: list.add(key("mixer.out_proj.weight"), vec![d, di], true)?,
        })
    }

    fn out_proj(params: &MixerParams) -> usize {
        params.out_proj
    }

    fn record(
        b: &Build<'_>,
        layers: &[(MixerParams, &LayerActs)],
    ) -> Result<(Self, Vec<MixerSteps>), GpuError> {
        let (gpu, k, dims) = (b.gpu, b.k, b.dims);
        let c = &dims.config;
        let (n, batch, levels, lambda_cols) =
            (dims.rows, dims.batch, dims.levels, dims.lambda_cols);
        let (d, h, ns, hp) = (c.hidden_size, c.num_heads, c.head_k_dim, c.head_v_dim);
        let (di, ch) = (c.d_inner(), c.conv_channels());
        // Gated-norm groups per token and their size.
        let (ngroups, gsize) = (di / c.norm_group_size, c.norm_group_size);
        let ms = M2Shape {
            rows: n,
            batch,
            heads: h,
            head_dim: hp,
            groups: c.num_groups,
            state: ns,
            lambda_cols,
            levels,
            log_linear: c.arch.is_log_linear(),
            conv_width: c.conv_kernel,
        };
        let dtl_stride = ms.dtl_stride();
        let pw = ms.prow_stride();
        let z = |label: &str, len: usize| b.zeros(label, len);
        let acts = layers
            .iter()
            .map(|_| MixerActs::new(b, ngroups, dtl_stride))
            .collect::<Result<Vec<_>, _>>()?;
        let op = OperatorBuffers::new(b)?;
        // dt `[N][H]`, beside the operator's inputs.
        let dt = z("dt", n * h)?;
        let gs = GradScratch {
            dyg: z("dyg", n * di)?,
            dy: z("dy", n * di)?,
            dz: z("dz", n * di)?,
            sdt: z("sdt", n * h)?,
            ddtl: z("ddtl", n * dtl_stride)?,
            dxbc: z("dxbc", n * ch)?,
            dproj: z("dproj", n * ch)?,
            prow: z("prow", n * pw)?,
        };
        // The operator's β (Mamba-2 ignores it) and the conv bias of models without one.
        let no_beta = z("no beta", 1)?;
        let no_bias = z("no conv bias", ch)?;

        let mk = M2TrainKernels::new(gpu)?;
        let scan_kernels = ScanKernels::new(gpu, Form::Mamba2)?;
        let bwd_kernels = M2Kernels::new(gpu)?;
        let shape = OperatorBuffers::shape(dims, Form::Mamba2);
        let (pv, pg) = (|i| b.value(i), |i| b.grad(i));
        let s = b.scratch;
        let conv_shape = ConvShape {
            rows: n,
            batch,
            stride: ch,
            c0: 0,
            channels: ch,
            width: c.conv_kernel,
        };
        let mut ops = Vec::with_capacity(layers.len());
        let mut steps = Vec::with_capacity(layers.len());
        for (&(bp, la), a) in layers.iter().zip(&acts) {
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
                l_scale: bp.l_scale.map_or(&s.absent, pv),
            };
            let gated_norm = NormIo {
                x: &a.yg,
                w: pv(bp.norm),
                out: &la.mixed,
                rstd: &a.rstd_n,
            };
            let conv_io = M2ConvIo {
                inp: &a.proj,
                w: pv(bp.conv),
                bias: bp.conv_bias.map_or(&no_bias, pv),
                pre: &a.conv_pre,
                out: &a.xbc,
            };
            let qkv_io = M2QkvIo {
                xbc: &a.xbc,
                dt: &dt,
                q: &op.q,
                k: &op.k,
                v: &op.v,
            };
            let recompute = || -> Result<[Step; 2], GpuError> {
                Ok([
                    mk.gates(gpu, ms, &gate_io, &op.g, &op.lam, &dt)?,
                    mk.qkv(gpu, ms, qkv_io)?,
                ])
            };
            // Forward, before the operator: in_proj's parts, the conv, the operator's inputs.
            let mut before = vec![
                linear_rows(b, &la.h1, w_z, &a.z)?,
                linear_rows(b, &la.h1, w_xbc, &a.proj)?,
                linear_rows(b, &la.h1, w_dtl, &a.dtl)?,
                mk.conv(gpu, ms, conv_io)?,
            ];
            before.extend(recompute()?);
            let scan = ChunkScan::new(gpu, &scan_kernels, shape, op.scan_io(&no_beta))?;
            // Forward, after the operator: skip, gated norm.
            let eps = c.norm_eps;
            let after = vec![
                mk.skip(gpu, ms, &op.o, &a.xbc, pv(bp.d_skip), &a.y)?,
                k.gate_silu(gpu, &a.y, &a.z, &a.yg, n * di)?,
                mk.group_norm(gpu, gated_norm, n * ngroups, gsize, ngroups, eps)?,
            ];

            // Backward, top down from dL/d mixed.
            let into_dyg = NormGrads {
                dy: &s.dmixed,
                dx: &gs.dyg,
                wrow: &s.wrow,
            };
            let output_gate = GateSiluGradIo {
                a: &a.y,
                b: &a.z,
                dout: &gs.dyg,
                da: &gs.dy,
                db: &gs.dz,
            };
            let bwd_after = vec![
                mk.group_norm_backward(gpu, gated_norm, into_dyg, n * ngroups, gsize, ngroups)?,
                b.weight_grad(n, di, bp.norm)?,
                k.gate_silu_backward(gpu, output_gate, n * di)?,
            ];
            // d_o = dy (y = o + D·x).
            let grad_io = op.grad_io(&no_beta, &no_beta, &gs.dy);
            let op_bwd = M2Backward::with_kernels(gpu, &bwd_kernels, shape, grad_io)?;
            let x_grads = M2XGradIo {
                xbc: &a.xbc,
                dt: &dt,
                d_skip: pv(bp.d_skip),
                dy: &gs.dy,
                dv: &op.dv,
                dxbc: &gs.dxbc,
                sdt: &gs.sdt,
                prow: &gs.prow,
            };
            let gate_grads = M2GateGradIo {
                dg: &op.dg,
                dlam: &op.dlam,
                sdt: &gs.sdt,
                ddtl: &gs.ddtl,
                prow: &gs.prow,
            };
            let mut bwd_before = vec![
                mk.x_backward(gpu, ms, x_grads)?,
                mk.gates_backward(gpu, ms, &gate_io, gate_grads)?,
                mk.bc_backward(gpu, ms, &op.dq, &op.dk, &gs.dxbc)?,
            ];
            let mut gate_params = vec![(bp.a_log, 0, h), (bp.dt_bias, h, h), (bp.d_skip, 2 * h, h)];
            if let Some(li) = bp.l_scale {
                gate_params.push((li, 3 * h, LAMBDA_LEVELS * h));
            }
            for (pi, off, cols) in gate_params {
                bwd_before.push(k.colsum(gpu, Rows::new(&gs.prow, off, pw), n, cols, pg(pi))?);
            }
            let (pre, dout) = (&a.conv_pre, &gs.dxbc);
            bwd_before.push(k.conv_backward(gpu, pre, dout, pv(bp.conv), &gs.dproj, conv_shape)?);
            bwd_before.push(k.conv_backward_w(gpu, pre, dout, &a.proj, pg(bp.conv), conv_shape)?);
            if let Some(bi) = bp.conv_bias {
                bwd_before.push(mk.conv_bias_backward(gpu, ms, pre, dout, pg(bi))?);
            }
            // in_proj's three row blocks, their input gradients summed into dh.
            for (i, (wr, dy)) in [(w_z, &gs.dz), (w_xbc, &gs.dproj), (w_dtl, &gs.ddtl)]
                .into_iter()
                .enumerate()
            {
                let dh = InputGrad {
                    dx: &s.dh,
                    accumulate: i > 0,
                };
                bwd_before.extend(linear_rows_backward(b, &la.h1, wr, dy, dh)?);
            }
            ops.push(BlockOperator {
                scan,
                recompute: recompute()?.into(),
                op_bwd,
            });
            steps.push(MixerSteps {
                before,
                after,
                bwd_after,
                bwd_before,
            });
        }
        let mixer = Mamba2Mixer {
            ops,
            _acts: acts,
            _grads: gs,
            _op: op,
            _other: vec![dt, no_beta, no_bias],
        };
        Ok((mixer, steps))
    }

    fn encode_operator(&self, enc: &mut wgpu::CommandEncoder, layer: usize) {
        self.ops[layer].scan.encode(enc);
    }

    fn encode_operator_backward(&self, enc: &mut wgpu::CommandEncoder, layer: usize) {
        let op = &self.ops[layer];
        encode_all(enc, &op.recompute);
        op.op_bwd.encode(enc);
    }

    /// A_log = log(1, 2, …, H) (fla `Mamba2PreTrainedModel`, which `hattention` and
    /// `mamba2mlp` inherit); dt_bias = softplus⁻¹(dt), dt = exp(U[ln 1e-3, ln 1e-1]) floored at
    /// 1e-4; D = 1; L = 1; norms 1 (spec §6.1).
    fn init_special(p: &Param, rng: &mut InitRng) -> Option<Vec<f32>> {
        let name = p.name.as_str();
        if name.ends_with("norm.weight")
            || name.ends_with("norm_f.weight")
            || name.ends_with(".L")
            || name.ends_with(".D")
        {
            Some(vec![1.0; p.len])
        } else if name.ends_with(".A_log") {
            Some((1..=p.len).map(|a| (a as f64).ln() as f32).collect())
        } else if name.ends_with(".dt_bias") {
            Some(rng.dt_bias(p.len))
        } else {
            None
        }
    }
}
