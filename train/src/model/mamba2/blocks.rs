//! The Mamba-2 blocks: how they record their forward and backward and initialise their own
//! parameters, and their pieces: where their parameters sit, the activations,
//! operator inputs and gradient scratch they keep, and their recorded steps.

use super::*;

/// Where each parameter of one block sits in [`Mamba2TrainModel::params`].
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockParams {
    pub(super) mixer_norm: usize,
    pub(super) in_proj: usize,
    pub(super) conv: usize,
    pub(super) conv_bias: Option<usize>,
    pub(super) a_log: usize,
    pub(super) dt_bias: usize,
    pub(super) d_skip: usize,
    pub(super) l_scale: Option<usize>,
    pub(super) norm: usize,
    pub(super) out_proj: usize,
    pub(super) mlp_norm: usize,
    pub(super) gate: usize,
    pub(super) up: usize,
    pub(super) down: usize,
}

/// Activations one block keeps from its forward for its backward. Rows (t, b).
pub(super) struct BlockActs {
    /// mixer_norm: 1/rms per row, and the normed input `[N][D]`.
    pub(super) rstd1: wgpu::Buffer,
    pub(super) h1: wgpu::Buffer,
    /// in_proj parts: z `[N][di]`, xBC before the conv `[N][ch]`, dt | dl `[N][H (+15H)]`.
    pub(super) z: wgpu::Buffer,
    pub(super) proj: wgpu::Buffer,
    pub(super) dtl: wgpu::Buffer,
    /// Conv sums before SiLU and the conv output (x | B | C) `[N][ch]`.
    pub(super) conv_pre: wgpu::Buffer,
    pub(super) xbc: wgpu::Buffer,
    /// y = o + D·x, y ⊙ SiLU(z), its 1/rms per norm group, normed `[N][di]`.
    pub(super) y: wgpu::Buffer,
    pub(super) yg: wgpu::Buffer,
    pub(super) rstd_n: wgpu::Buffer,
    pub(super) yn: wgpu::Buffer,
    /// Residual after the mixer `[N][D]`, mlp_norm's 1/rms and output.
    pub(super) x_mid: wgpu::Buffer,
    pub(super) rstd2: wgpu::Buffer,
    pub(super) h2: wgpu::Buffer,
    /// SwiGLU gate and up projections, and SiLU(gate)·up `[N][I]`.
    pub(super) mg: wgpu::Buffer,
    pub(super) mu: wgpu::Buffer,
    pub(super) act: wgpu::Buffer,
}

/// The operator's inputs and output, shared by all blocks: cheap to recompute from the kept
/// conv output and dt | dl rows, so the backward recomputes them instead of every block
/// keeping its own (q and k are per-head copies of B and C, H times their size).
pub(super) struct OpInputs {
    /// q, k `[N][H][N_state]`, v `[N][H][P]`, g, dt `[N][H]`, λ `[N][H][lambda_cols]`,
    /// o `[N][H][P]`.
    pub(super) q: wgpu::Buffer,
    pub(super) k: wgpu::Buffer,
    pub(super) v: wgpu::Buffer,
    pub(super) g: wgpu::Buffer,
    pub(super) dt: wgpu::Buffer,
    pub(super) lam: wgpu::Buffer,
    pub(super) o: wgpu::Buffer,
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
    pub(super) dyn_: wgpu::Buffer,
    pub(super) dyg: wgpu::Buffer,
    pub(super) dy: wgpu::Buffer,
    pub(super) dz: wgpu::Buffer,
    pub(super) dq: wgpu::Buffer,
    pub(super) dk: wgpu::Buffer,
    pub(super) dv: wgpu::Buffer,
    pub(super) dg: wgpu::Buffer,
    pub(super) dlam: wgpu::Buffer,
    pub(super) sdt: wgpu::Buffer,
    pub(super) ddtl: wgpu::Buffer,
    pub(super) dxbc: wgpu::Buffer,
    pub(super) dproj: wgpu::Buffer,
    /// Per-row shares of norm-weight gradients `[N][max(D, di)]`.
    pub(super) wrow: wgpu::Buffer,
    /// Per-row shares of A_log, dt_bias, D, L gradients `[N][prow_stride]`.
    pub(super) prow: wgpu::Buffer,
}

/// One block's recorded work.
pub(super) struct BlockSteps {
    pub(super) before_scan: Vec<Step>,
    pub(super) scan: ChunkScan,
    pub(super) after_scan: Vec<Step>,
    /// Backward, top down: MLP and output side, the operator's inputs recomputed, the
    /// operator, then the input side.
    pub(super) bwd_after: Vec<Step>,
    pub(super) recompute: Vec<Step>,
    pub(super) op_bwd: M2Backward,
    pub(super) bwd_before: Vec<Step>,
}

impl Blocks for Mamba2Blocks {
    const INIT_SALT: u64 = 0x6d61_6d62_615f_696e;

    fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        for s in &self.steps {
            encode_all(enc, &s.before_scan);
            mark(enc, Stage::MixerIn);
            s.scan.encode(enc);
            mark(enc, Stage::Operator);
            encode_all(enc, &s.after_scan);
            mark(enc, Stage::MixerOut);
        }
    }

    fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        for s in self.steps.iter().rev() {
            encode_all(enc, &s.bwd_after);
            mark(enc, Stage::MixerOutBwd);
            encode_all(enc, &s.recompute);
            s.op_bwd.encode(enc);
            mark(enc, Stage::OperatorBwd);
            encode_all(enc, &s.bwd_before);
            mark(enc, Stage::MixerInBwd);
        }
    }

    fn output_params(&self) -> Vec<usize> {
        self.blocks
            .iter()
            .flat_map(|b| [b.out_proj, b.down])
            .collect()
    }

    /// A_log = log(1, 2, …, H) (fla `Mamba2PreTrainedModel`, which `hattention` and
    /// `mamba2mlp` inherit); dt_bias = softplus⁻¹(dt), dt = exp(U[ln 1e-3, ln 1e-1]) floored at
    /// 1e-4; D = 1; L = 1; norms 1 (spec §6.1).
    fn init_special(&self, p: &Param, rng: &mut InitRng) -> Option<Vec<f32>> {
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
