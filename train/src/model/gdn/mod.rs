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

use crate::model::init::InitRng;
use crate::model::layer::{Build, Dims, Keys, LayerActs, Mixer, MixerSteps, Norm};
use crate::model::operator::OperatorBuffers;
use crate::model::shared::ParamList;
use crate::model::skeleton::TrainModel;
use loglinear_host_gpu::chunk_scan::{ChunkScan, Form, ScanKernels};
use loglinear_host_gpu::gpu::{GpuError, Rows};
use loglinear_host_gpu::grad::op_gdn::GdnBackward;
use loglinear_host_gpu::train::kernels::{
    ConvShape, GateIo, GateShape, GateSiluGradIo, QkvIo, QkvShape,
};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;
use loglinear_runtime::{Arch, LAMBDA_LEVELS};

mod blocks;
use blocks::*;

/// The Gated DeltaNet mixers of a [`GdnTrainModel`]: their activations, and the operator's
/// forward scan and backward that all blocks share (and their scratch, which grows with
/// T·B·H·dk·dv per level): each block's saved q, k, v, g, β, λ are copied into the
/// operator's buffers before its scan and its backward, o out after the scan.
pub struct GdnMixer {
    acts: Vec<MixerActs>,
    op: OperatorBuffers,
    /// The operator's β `[N][H]`, beside its other inputs.
    beta: wgpu::Buffer,
    scan: ChunkScan,
    op_bwd: GdnBackward,
    // Kept alive for the bind groups.
    _grads: GradScratch,
}

impl GdnMixer {
    /// Records copying block `layer`'s saved operator inputs into the operator's.
    fn load(&self, enc: &mut wgpu::CommandEncoder, layer: usize) {
        let a = &self.acts[layer];
        let op = &self.op;
        for (src, dst) in [
            (&a.q, &op.q),
            (&a.k, &op.k),
            (&a.v, &op.v),
            (&a.g, &op.g),
            (&a.beta, &self.beta),
            (&a.lam, &op.lam),
        ] {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
        }
    }
}

/// A GDN language model set up for training on B windows of T tokens.
pub type GdnTrainModel = TrainModel<GdnMixer>;

impl Mixer for GdnMixer {
    const INIT_SALT: u64 = 0x6764_6e5f_696e_6974;
    const KEYS: Keys = Keys {
        embedding: "model.embeddings.weight",
        layers: "model.layers",
        input_norm: "attn_norm.weight",
        final_norm: "model.norm.weight",
    };
    const MODEL: &'static str = "GdnTrainModel";
    const FAMILY: &'static str = "Gated DeltaNet";

    fn trains(arch: Arch) -> bool {
        matches!(arch, Arch::LogLinearGatedDeltaNet | Arch::GatedDeltaNet)
    }

    type Params = MixerParams;

    fn add_params(
        list: &mut ParamList,
        dims: &Dims,
        key: &dyn Fn(&str) -> String,
    ) -> Result<MixerParams, GpuError> {
        let c = &dims.config;
        let ll = c.arch.is_log_linear();
        let (d, h, dv, w) = (c.hidden_size, c.num_heads, c.head_v_dim, c.conv_kernel);
        let (kd, vd) = (c.key_dim(), c.d_inner());
        Ok(MixerParams {
            q_proj: list.add(key("attn.q_proj.weight"), vec![kd, d], true)?,
            k_proj: list.add(key("attn.k_proj.weight"), vec![kd, d], true)?,
            v_proj: list.add(key("attn.v_proj.weight"), vec![vd, d], true)?,
            a_proj: list.add(key("attn.a_proj.weight"), vec![h, d], true)?,
            b_proj: list.add(key("attn.b_proj.weight"), vec![h, d], true)?,
            l_proj: list.add_if(
                ll,
                key("attn.l_proj.weight"),
                vec![LAMBDA_LEVELS * h, d],
                true,
            )?,
            g_proj: list.add(key("attn.g_proj.weight"), vec![vd, d], true)?,
            o_proj: list.add(key("attn.o_proj.weight"), vec![d, vd], true)?,
            q_conv: list.add(key("attn.q_conv1d.weight"), vec![kd, 1, w], true)?,
            k_conv: list.add(key("attn.k_conv1d.weight"), vec![kd, 1, w], true)?,
            v_conv: list.add(key("attn.v_conv1d.weight"), vec![vd, 1, w], true)?,
            a_log: list.add(key("attn.A_log"), vec![h], false)?,
            dt_bias: list.add(key("attn.dt_bias"), vec![h], false)?,
            l_scale: list.add_if(ll, key("attn.L"), vec![h, LAMBDA_LEVELS], false)?,
            o_norm: list.add(key("attn.o_norm.weight"), vec![dv], false)?,
        })
    }

    fn out_proj(params: &MixerParams) -> usize {
        params.o_proj
    }

    fn record(
        b: &Build<'_>,
        layers: &[(MixerParams, &LayerActs)],
    ) -> Result<(Self, Vec<MixerSteps>), GpuError> {
        let (gpu, k, dims) = (b.gpu, b.k, b.dims);
        let c = &dims.config;
        let ll = c.arch.is_log_linear();
        let (n, batch, levels, lambda_cols) =
            (dims.rows, dims.batch, dims.levels, dims.lambda_cols);
        let (d, h, dk, dv) = (c.hidden_size, c.num_heads, c.head_k_dim, c.head_v_dim);
        let (kd, vd, ch, w) = (c.key_dim(), c.d_inner(), c.conv_channels(), c.conv_kernel);
        let abl_stride = 2 * h + if ll { LAMBDA_LEVELS * h } else { 0 };
        let pw = 2 * h + LAMBDA_LEVELS * h;
        let z = |label: &str, len: usize| b.zeros(label, len);
        let acts = layers
            .iter()
            .map(|_| MixerActs::new(b, abl_stride))
            .collect::<Result<Vec<_>, _>>()?;
        let gs = GradScratch {
            dy: z("dy", n * vd)?,
            dgp: z("dgp", n * vd)?,
            d_o: z("d_o", n * vd)?,
            dbeta: z("dbeta", n * h)?,
            dabl: z("dabl", n * abl_stride)?,
            dconv_out: z("dconv_out", n * ch)?,
            dproj: z("dproj", n * ch)?,
            prow: z("prow", n * pw)?,
        };
        let op = OperatorBuffers::new(b)?;
        let beta = z("op beta", n * h)?;
        let shape = OperatorBuffers::shape(dims, Form::Gdn);
        let scan_kernels = ScanKernels::new(gpu, Form::Gdn)?;
        let scan = ChunkScan::new(gpu, &scan_kernels, shape, op.scan_io(&beta))?;
        let op_bwd = GdnBackward::new(gpu, shape, op.grad_io(&beta, &gs.dbeta, &gs.d_o))?;
        let (pv, pg) = (|i| b.value(i), |i| b.grad(i));
        let s = b.scratch;
        let conv_shape = |c0: usize, channels: usize| ConvShape {
            rows: n,
            batch,
            stride: ch,
            c0,
            channels,
            width: w,
        };
        let gate_shape = GateShape {
            rows: n,
            heads: h,
            lambda_cols,
            abl_stride,
            log_linear: ll,
            dk,
            levels,
        };
        let qkv_shape = QkvShape {
            rows: n,
            heads: h,
            dk,
            dv,
        };
        let mut steps = Vec::with_capacity(layers.len());
        for (&(bp, la), a) in layers.iter().zip(&acts) {
            let convs = [
                (bp.q_conv, 0, kd),
                (bp.k_conv, kd, kd),
                (bp.v_conv, 2 * kd, vd),
            ];
            let l_scale = bp.l_scale.map_or(&s.absent, pv);
            let h1 = Rows::new(&la.h1, 0, d);
            let proj = |off| Rows::new(&a.proj, off, ch);
            let abl = |off| Rows::new(&a.abl, off, abl_stride);
            let o_norm = Norm {
                x: &a.o,
                w: bp.o_norm,
                out: &a.y,
                rstd: &a.rstd_o,
                rows: n * h,
                cols: dv,
            };
            let gates = |beta: &wgpu::Buffer, g: &wgpu::Buffer, lam: &wgpu::Buffer, backward| {
                let io = GateIo {
                    abl: &a.abl,
                    dt_bias: pv(bp.dt_bias),
                    a_log: pv(bp.a_log),
                    l_scale,
                    beta,
                    g,
                    lam,
                    dabl: &gs.dabl,
                    prow: &gs.prow,
                };
                k.gates(gpu, io, gate_shape, backward)
            };
            // Forward, before the operator: projections, short convs, q/k/v, gates.
            let mut before = vec![
                b.linear(bp.q_proj, h1, proj(0))?,
                b.linear(bp.k_proj, h1, proj(kd))?,
                b.linear(bp.v_proj, h1, proj(2 * kd))?,
            ];
            for &(wi, c0, cn) in &convs {
                let s = conv_shape(c0, cn);
                before.push(k.conv(gpu, &a.proj, pv(wi), &a.conv_pre, &a.conv_out, s)?);
            }
            let qkv_io = QkvIo {
                x: &a.conv_out,
                dx: &gs.dconv_out,
                q: &a.q,
                k: &a.k,
                v: &a.v,
            };
            before.push(k.qkv(gpu, qkv_io, qkv_shape, false)?);
            before.push(b.linear(bp.a_proj, h1, abl(0))?);
            before.push(b.linear(bp.b_proj, h1, abl(h))?);
            if let Some(lp) = bp.l_proj {
                before.push(b.linear(lp, h1, abl(2 * h))?);
            }
            before.push(gates(&a.beta, &a.g, &a.lam, false)?);
            before.push(b.linear(bp.g_proj, h1, Rows::new(&a.gp, 0, vd))?);
            // Forward, after the operator: output norm and gate.
            let after = vec![
                b.rmsnorm(o_norm)?,
                k.gate_silu(gpu, &a.y, &a.gp, &la.mixed, n * vd)?,
            ];

            // Backward, top down from dL/d mixed.
            let output_gate = GateSiluGradIo {
                a: &a.y,
                b: &a.gp,
                dout: &s.dmixed,
                da: &gs.dy,
                db: &gs.dgp,
            };
            let mut bwd_after = vec![k.gate_silu_backward(gpu, output_gate, n * vd)?];
            bwd_after.extend(b.rmsnorm_backward(o_norm, &gs.dy, &gs.d_o, false)?);
            let mut bwd_before = vec![gates(&gs.dbeta, &op.dg, &op.dlam, true)?];
            let mut gate_params = vec![(bp.a_log, 0, h), (bp.dt_bias, h, h)];
            if let Some(li) = bp.l_scale {
                gate_params.push((li, 2 * h, LAMBDA_LEVELS * h));
            }
            for (pi, off, cols) in gate_params {
                bwd_before.push(k.colsum(gpu, Rows::new(&gs.prow, off, pw), n, cols, pg(pi))?);
            }
            let qkv_grads = QkvIo {
                q: &op.dq,
                k: &op.dk,
                v: &op.dv,
                ..qkv_io
            };
            bwd_before.push(k.qkv(gpu, qkv_grads, qkv_shape, true)?);
            for &(wi, c0, cn) in &convs {
                let s = conv_shape(c0, cn);
                let (pre, dout) = (&a.conv_pre, &gs.dconv_out);
                bwd_before.push(k.conv_backward(gpu, pre, dout, pv(wi), &gs.dproj, s)?);
                bwd_before.push(k.conv_backward_w(gpu, pre, dout, &a.proj, pg(wi), s)?);
            }
            // The seven projections of h1, their input gradients summed into dh.
            let mut projections = vec![
                (bp.q_proj, &gs.dproj, 0, ch),
                (bp.k_proj, &gs.dproj, kd, ch),
                (bp.v_proj, &gs.dproj, 2 * kd, ch),
                (bp.a_proj, &gs.dabl, 0, abl_stride),
                (bp.b_proj, &gs.dabl, h, abl_stride),
                (bp.g_proj, &gs.dgp, 0, vd),
            ];
            if let Some(lp) = bp.l_proj {
                projections.push((lp, &gs.dabl, 2 * h, abl_stride));
            }
            let dh = Rows::new(&s.dh, 0, d);
            for (i, &(wi, dy, off, stride)) in projections.iter().enumerate() {
                let dy = Rows::new(dy, off, stride);
                bwd_before.extend(b.linear_backward(wi, h1, dy, dh, i > 0)?);
            }
            steps.push(MixerSteps {
                before,
                after,
                bwd_after,
                bwd_before,
            });
        }
        let mixer = GdnMixer {
            acts,
            op,
            beta,
            scan,
            op_bwd,
            _grads: gs,
        };
        Ok((mixer, steps))
    }

    fn encode_operator(&self, enc: &mut wgpu::CommandEncoder, layer: usize) {
        self.load(enc, layer);
        self.scan.encode(enc);
        let o = &self.acts[layer].o;
        enc.copy_buffer_to_buffer(&self.op.o, 0, o, 0, o.size());
    }

    fn encode_operator_backward(&self, enc: &mut wgpu::CommandEncoder, layer: usize) {
        self.load(enc, layer);
        self.op_bwd.encode(enc);
    }

    /// A_log = log U[0, 16]; dt_bias = softplus⁻¹(dt), dt = exp(U[ln 1e-3, ln 1e-1]) floored
    /// at 1e-4; L = 1; norms 1 (spec §6.2).
    fn init_special(p: &Param, rng: &mut InitRng) -> Option<Vec<f32>> {
        let name = p.name.as_str();
        if name.ends_with("norm.weight") || name.ends_with(".L") {
            Some(vec![1.0; p.len])
        } else if name.ends_with(".A_log") {
            Some(
                (0..p.len)
                    .map(|_| (16.0 * rng.uniform()).max(1e-30).ln() as f32)
                    .collect(),
            )
        } else if name.ends_with(".dt_bias") {
            Some(rng.dt_bias(p.len))
        } else {
            None
        }
    }
}
