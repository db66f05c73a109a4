//! The Gated DeltaNet blocks: how they record their forward and backward and initialise their
//! own parameters, and their pieces: where their parameters sit, the activations
//! and gradient scratch they keep, their recorded steps, and the shared operator.

use super::*;

/// Where each parameter of one block sits in [`GdnTrainModel::params`].
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockParams {
    pub(super) attn_norm: usize,
    pub(super) q_proj: usize,
    pub(super) k_proj: usize,
    pub(super) v_proj: usize,
    pub(super) a_proj: usize,
    pub(super) b_proj: usize,
    pub(super) l_proj: Option<usize>,
    pub(super) g_proj: usize,
    pub(super) o_proj: usize,
    pub(super) q_conv: usize,
    pub(super) k_conv: usize,
    pub(super) v_conv: usize,
    pub(super) a_log: usize,
    pub(super) dt_bias: usize,
    pub(super) l_scale: Option<usize>,
    pub(super) o_norm: usize,
    pub(super) mlp_norm: usize,
    pub(super) gate: usize,
    pub(super) up: usize,
    pub(super) down: usize,
}

/// Activations one block keeps from its forward for its backward. Rows (t, b).
pub(super) struct BlockActs {
    /// attn_norm: 1/rms per row, and the normed input `[N][D]`.
    pub(super) rstd1: wgpu::Buffer,
    pub(super) h1: wgpu::Buffer,
    /// q|k|v projections before the conv `[N][ch]`, conv sums before SiLU, conv outputs.
    pub(super) proj: wgpu::Buffer,
    pub(super) conv_pre: wgpu::Buffer,
    pub(super) conv_out: wgpu::Buffer,
    /// Operator inputs: q_used, k_used `[N][H][dk]`, v `[N][H][dv]`, β, g `[N][H]`,
    /// λ `[N][H][lambda_cols]`.
    pub(super) q: wgpu::Buffer,
    pub(super) k: wgpu::Buffer,
    pub(super) v: wgpu::Buffer,
    pub(super) beta: wgpu::Buffer,
    pub(super) g: wgpu::Buffer,
    pub(super) lam: wgpu::Buffer,
    /// `[N][a (H) | b (H) | l (15H, log-linear)]`.
    pub(super) abl: wgpu::Buffer,
    /// g_proj x `[N][vd]`.
    pub(super) gp: wgpu::Buffer,
    /// Operator output, its per-head 1/rms, normed, gated.
    pub(super) o: wgpu::Buffer,
    pub(super) rstd_o: wgpu::Buffer,
    pub(super) y: wgpu::Buffer,
    pub(super) yg: wgpu::Buffer,
    /// Residual after the mixer `[N][D]`, mlp_norm's 1/rms and output.
    pub(super) x_mid: wgpu::Buffer,
    pub(super) rstd2: wgpu::Buffer,
    pub(super) h2: wgpu::Buffer,
    /// SwiGLU gate and up projections, and SiLU(gate)·up `[N][I]`.
    pub(super) mg: wgpu::Buffer,
    pub(super) mu: wgpu::Buffer,
    pub(super) act: wgpu::Buffer,
}

/// Gradient scratch shared by all blocks (each block's backward overwrites it).
pub(super) struct GradScratch {
    /// dL/d(residual) `[N][D]`, carried down the layers.
    pub(super) dx: wgpu::Buffer,
    /// dL/d(normed input) `[N][D]`.
    pub(super) dh: wgpu::Buffer,
    pub(super) dact: wgpu::Buffer,
    pub(super) dmg: wgpu::Buffer,
    pub(super) dmu: wgpu::Buffer,
    pub(super) dyg: wgpu::Buffer,
    pub(super) dy: wgpu::Buffer,
    pub(super) dgp: wgpu::Buffer,
    pub(super) d_o: wgpu::Buffer,
    pub(super) dq: wgpu::Buffer,
    pub(super) dk: wgpu::Buffer,
    pub(super) dv: wgpu::Buffer,
    pub(super) dg: wgpu::Buffer,
    pub(super) dbeta: wgpu::Buffer,
    pub(super) dlam: wgpu::Buffer,
    pub(super) dabl: wgpu::Buffer,
    pub(super) dconv_out: wgpu::Buffer,
    pub(super) dproj: wgpu::Buffer,
    /// Per-row shares of norm-weight gradients `[N][max(D, vd)]`.
    pub(super) wrow: wgpu::Buffer,
    /// Per-row shares of the gate parameters' gradients `[N][17H]`.
    pub(super) prow: wgpu::Buffer,
}

/// One block's recorded work.
pub(super) struct BlockSteps {
    pub(super) before_scan: Vec<Step>,
    pub(super) after_scan: Vec<Step>,
    /// Backward, top down: MLP and output side, then the operator, then the input side.
    pub(super) bwd_after: Vec<Step>,
    pub(super) bwd_before: Vec<Step>,
}

/// The operator's inputs and output, shared by all blocks: one forward scan and one backward
/// (and their scratch, which grows with T·B·H·dk·dv per level) serve every layer; each block's
/// saved q, k, v, g, β, λ are copied in before its scan and its backward, o out after the scan.
pub(super) struct OperatorIo {
    pub(super) q: wgpu::Buffer,
    pub(super) k: wgpu::Buffer,
    pub(super) v: wgpu::Buffer,
    pub(super) g: wgpu::Buffer,
    pub(super) beta: wgpu::Buffer,
    pub(super) lam: wgpu::Buffer,
    pub(super) o: wgpu::Buffer,
}

impl OperatorIo {
    /// Records copying a block's saved operator inputs into the shared ones.
    pub(super) fn load(&self, enc: &mut wgpu::CommandEncoder, a: &BlockActs) {
        for (src, dst) in [
            (&a.q, &self.q),
            (&a.k, &self.k),
            (&a.v, &self.v),
            (&a.g, &self.g),
            (&a.beta, &self.beta),
            (&a.lam, &self.lam),
        ] {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
        }
    }
}

/// The GDN operator's backward for one block (`grad::op_gdn`).
pub(super) struct OpBackward {
    pub(super) inner: loglinear_host_gpu::grad::op_gdn::GdnBackward,
}

impl OpBackward {
    pub(super) fn new(gpu: &Gpu, shape: ScanShape, io: OpGradIo<'_>) -> Result<Self, GpuError> {
        Ok(Self {
            inner: loglinear_host_gpu::grad::op_gdn::GdnBackward::new(gpu, shape, io)?,
        })
    }

    pub(super) fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        self.inner.encode(enc);
    }
}

impl Blocks for GdnBlocks {
    const INIT_SALT: u64 = 0x6764_6e5f_696e_6974;

    fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        for (s, a) in self.steps.iter().zip(&self.acts) {
            encode_all(enc, &s.before_scan);
            mark(enc, Stage::MixerIn);
            self.op.load(enc, a);
            self.scan.encode(enc);
            enc.copy_buffer_to_buffer(&self.op.o, 0, &a.o, 0, a.o.size());
            mark(enc, Stage::Operator);
            encode_all(enc, &s.after_scan);
            mark(enc, Stage::MixerOut);
        }
    }

    fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        for (s, a) in self.steps.iter().zip(&self.acts).rev() {
            encode_all(enc, &s.bwd_after);
            mark(enc, Stage::MixerOutBwd);
            self.op.load(enc, a);
            self.op_bwd.encode(enc);
            mark(enc, Stage::OperatorBwd);
            encode_all(enc, &s.bwd_before);
            mark(enc, Stage::MixerInBwd);
        }
    }

    fn output_params(&self) -> Vec<usize> {
        self.blocks
            .iter()
            .flat_map(|b| [b.o_proj, b.down])
            .collect()
    }

    /// A_log = log U[0, 16]; dt_bias = softplus⁻¹(dt), dt = exp(U[ln 1e-3, ln 1e-1]) floored
    /// at 1e-4; L = 1; norms 1 (spec §6.2).
    fn init_special(&self, p: &Param, rng: &mut InitRng) -> Option<Vec<f32>> {
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
