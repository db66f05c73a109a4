//! The batched layer ops as compute kernels: every op runs over all T tokens at once. Each
//! builder returns a [`Step`] (pipeline, bind group, grid) that records one dispatch; steps are
//! made once per prefill and encoded as often as wanted.
//!
//! Layouts are row-major and token-major (`[T][…]`), as in the CPU runtime. Kernel parameters
//! are small uniform blocks of eight 32-bit words (floats as their bits).

use crate::gpu::MAX_GROUPS;
use crate::gpu::{dispatch, CoopMatmul, Gpu, GpuError, Kernel};
use crate::weights::GpuMatrix;
use loglinear_runtime::DType;

const COMMON: &str = include_str!("shaders/common.wgsl");
const F16: &str = include_str!("shaders/f16.wgsl");
const MATMUL: &str = include_str!("shaders/matmul.wgsl");
const MATMUL_COOP: &str = include_str!("shaders/matmul_coop.wgsl");
const GATHER: &str = include_str!("shaders/gather.wgsl");

/// Output tile of the fp32 matmul kernel (rows and columns).
const MATMUL_TILE: usize = 64;

/// One recorded-on-demand dispatch.
pub struct Step<'k> {
    kernel: &'k Kernel,
    bind: wgpu::BindGroup,
    groups: [u32; 3],
}

impl Step<'_> {
    /// Records the dispatch into `encoder`, in a compute pass of its own.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        dispatch(encoder, self.kernel, &self.bind, self.groups);
    }

    /// Records the dispatch into an open compute pass.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.kernel.pipeline);
        pass.set_bind_group(0, &self.bind, &[]);
        pass.dispatch_workgroups(self.groups[0], self.groups[1], self.groups[2]);
    }
}

/// Records `steps` in order into one compute pass (each dispatch is its own synchronization
/// scope, so a step sees what the previous ones wrote), saving a pass per dispatch.
pub fn encode_steps<'a, 'k: 'a>(
    encoder: &mut wgpu::CommandEncoder,
    label: &str,
    steps: impl IntoIterator<Item = &'a Step<'k>>,
) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        timestamp_writes: None,
    });
    for s in steps {
        s.record(&mut pass);
    }
}

/// A 2-D grid of `n` workgroups laid out row by row (shaders rebuild the flat index).
fn grid(n: usize) -> Result<[u32; 3], GpuError> {
    let n = n.max(1);
    let x = n.min(MAX_GROUPS);
    let y = n.div_ceil(x);
    if y > MAX_GROUPS {
        return Err(GpuError::Invalid(format!(
            "{n} workgroups is over the dispatch limit"
        )));
    }
    Ok([x as u32, y as u32, 1])
}

/// Grid for `n` independent threads in 256-wide workgroups.
fn grid_threads(n: usize) -> Result<[u32; 3], GpuError> {
    grid(n.div_ceil(256))
}

/// A uniform parameter block; `words` are u32 values or f32 bits.
fn params(gpu: &Gpu, label: &str, words: &[u32]) -> wgpu::Buffer {
    let mut block = [0u32; 8];
    block[..words.len()].copy_from_slice(words);
    gpu.uniform_from(label, &block)
}

fn u(n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).map_err(|_| GpuError::Invalid(format!("size {n} does not fit in 32 bits")))
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q8_0 => 2,
        DType::Q4_0 => 3,
    }
}

/// The WGSL header of matmul_coop.wgsl for one configuration: `enable` directives (which
/// must come first), the element and matrix types, S and the workgroup size.
fn coop_header(cfg: &CoopMatmul) -> String {
    let (et, enable_f16) = match cfg.input {
        wgpu::CooperativeScalarType::F16 => ("f16", "enable f16;\n"),
        _ => ("f32", ""),
    };
    let s = cfg.size;
    format!(
        "{enable_f16}enable wgpu_cooperative_matrix;\n\
         alias ET = {et};\n\
         alias MatA = coop_mat{s}x{s}<{et}, A>;\n\
         alias MatB = coop_mat{s}x{s}<{et}, B>;\n\
         alias MatC = coop_mat{s}x{s}<f32, C>;\n\
         const S: u32 = {s}u;\n\
         const SG: u32 = {}u;\n\
         const THREADS: u32 = {}u;\n",
        cfg.subgroup_size,
        cfg.threads()
    )
}

/// Which projection matmul kernel a [`Kernels`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPath {
    /// The fp32 register-blocked kernel (matmul.wgsl): fp32 tolerances.
    Fp32,
    /// Cooperative matrices (matmul_coop.wgsl): inputs rounded to the configuration's type.
    Coop(CoopMatmul),
}

/// Every layer kernel, compiled once.
pub struct Kernels {
    /// Per weight dtype (F32, F16, Q8_0, Q4_0): the coop kernels when `path` is `Coop`.
    matmul: Vec<Kernel>,
    path: MatmulPath,
    /// Why the coop kernels are not used (no configuration, or they failed to build).
    coop_note: Option<String>,
    gather: Vec<Kernel>,
    rmsnorm: Kernel,
    add: Kernel,
    gate_silu: Kernel,
    conv: Kernel,
    conv_state: Kernel,
    mamba2_qk: Kernel,
    mamba2_pre: Kernel,
    mamba2_post: Kernel,
    gdn_qkv: Kernel,
    gdn_gates: Kernel,
}

impl Kernels {
    /// Compiles every kernel; the matmuls on cooperative matrices when the device has a
    /// configuration for them ([`Gpu::coop_matmul`]) and they build, else the fp32 kernel.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        Self::new_with(gpu, true)
    }

    /// As [`Kernels::new`]; `coop: false` always takes the fp32 matmul kernel.
    pub fn new_with(gpu: &Gpu, coop: bool) -> Result<Self, GpuError> {
        let weight_access = [
            ("f32", include_str!("shaders/weights_f32.wgsl")),
            ("f16", include_str!("shaders/weights_f16.wgsl")),
            ("q8_0", include_str!("shaders/weights_q8_0.wgsl")),
            ("q4_0", include_str!("shaders/weights_q4_0.wgsl")),
        ];
        let mut matmul = Vec::new();
        let mut gather = Vec::new();
        for (name, src) in weight_access {
            let head = format!("{F16}\n{src}\n");
            matmul.push(gpu.kernel(
                &format!("matmul_{name}"),
                &format!("{head}{MATMUL}"),
                "main",
            )?);
            gather.push(gpu.kernel(
                &format!("gather_{name}"),
                &format!("{head}{GATHER}"),
                "main",
            )?);
        }
        let mut path = MatmulPath::Fp32;
        let mut coop_note = None;
        match gpu.coop_matmul() {
            Some(cfg) if coop => {
                let built: Result<Vec<Kernel>, GpuError> = weight_access
                    .iter()
                    .map(|(name, src)| {
                        let source = format!("{}{F16}\n{src}\n{MATMUL_COOP}", coop_header(&cfg));
                        gpu.kernel(&format!("matmul_coop_{name}"), &source, "main")
                    })
                    .collect();
                // A driver that cannot build the coop kernels still has the fp32 one.
                match built {
                    Ok(kernels) => {
                        matmul = kernels;
                        path = MatmulPath::Coop(cfg);
                    }
                    Err(e) => coop_note = Some(format!("coop kernels failed to build: {e}")),
                }
            }
            Some(_) => coop_note = Some("coop kernels not requested".into()),
            None => coop_note = Some("no cooperative-matrix configuration".into()),
        }
        let k = |label: &str, src: &str| gpu.kernel(label, &format!("{COMMON}\n{src}"), "main");
        Ok(Self {
            matmul,
            path,
            coop_note,
            gather,
            rmsnorm: k("rmsnorm", include_str!("shaders/rmsnorm.wgsl"))?,
            add: k("add", include_str!("shaders/add.wgsl"))?,
            gate_silu: k("gate_silu", include_str!("shaders/gate_silu.wgsl"))?,
            conv: k("conv", include_str!("shaders/conv.wgsl"))?,
            conv_state: k("conv_state", include_str!("shaders/conv_state.wgsl"))?,
            mamba2_qk: k("mamba2_qk", include_str!("shaders/mamba2_qk.wgsl"))?,
            mamba2_pre: k("mamba2_pre", include_str!("shaders/mamba2_pre.wgsl"))?,
            mamba2_post: k("mamba2_post", include_str!("shaders/mamba2_post.wgsl"))?,
            gdn_qkv: k("gdn_qkv", include_str!("shaders/gdn_qkv.wgsl"))?,
            gdn_gates: k("gdn_gates", include_str!("shaders/gdn_gates.wgsl"))?,
        })
    }

    /// The matmul kernel these kernels run.
    pub fn matmul_path(&self) -> MatmulPath {
        self.path
    }

    /// Why the coop matmul is not used, when it is not.
    pub fn coop_note(&self) -> Option<&str> {
        self.coop_note.as_deref()
    }

    fn step<'k>(
        &'k self,
        gpu: &Gpu,
        kernel: &'k Kernel,
        buffers: &[&wgpu::Buffer],
        words: &[u32],
        groups: [u32; 3],
    ) -> Step<'k> {
        let p = params(gpu, &kernel.label, words);
        let mut all: Vec<&wgpu::Buffer> = buffers.to_vec();
        all.push(&p);
        Step {
            kernel,
            bind: gpu.bind(kernel, &all),
            groups,
        }
    }

    /// `y[y_offset + r·y_stride + n] = Σ_k x[x_offset + r·x_stride + k] · W[n][k]` for the
    /// `m` rows r; W (`n × k`) in its own storage type.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul<'k>(
        &'k self,
        gpu: &Gpu,
        w: &GpuMatrix,
        x: &wgpu::Buffer,
        x_offset: usize,
        x_stride: usize,
        m: usize,
        y: &wgpu::Buffer,
        y_offset: usize,
        y_stride: usize,
    ) -> Result<Step<'k>, GpuError> {
        let tile = match self.path {
            MatmulPath::Fp32 => MATMUL_TILE,
            MatmulPath::Coop(cfg) => cfg.tile() as usize,
        };
        let groups_y = m.div_ceil(tile);
        if groups_y > MAX_GROUPS {
            return Err(GpuError::Invalid(format!(
                "{m} rows is over the matmul grid limit"
            )));
        }
        let groups = [u(w.rows.div_ceil(tile))?, u(groups_y)?, 1];
        let words = [
            u(m)?,
            u(w.rows)?,
            u(w.cols)?,
            u(x_offset)?,
            u(x_stride)?,
            u(y_offset)?,
            u(y_stride)?,
        ];
        let kernel = &self.matmul[dtype_index(w.dtype)];
        Ok(self.step(gpu, kernel, &[&w.buf, x, y], &words, groups))
    }

    /// `out[t] = W[ids[t]]` (embedding rows, dequantized) for `t` tokens.
    pub fn gather<'k>(
        &'k self,
        gpu: &Gpu,
        w: &GpuMatrix,
        ids: &wgpu::Buffer,
        t: usize,
        out: &wgpu::Buffer,
    ) -> Result<Step<'k>, GpuError> {
        let kernel = &self.gather[dtype_index(w.dtype)];
        let groups = grid_threads(t * w.cols)?;
        Ok(self.step(
            gpu,
            kernel,
            &[&w.buf, ids, out],
            &[u(t)?, u(w.cols)?],
            groups,
        ))
    }

    /// RMSNorm of `rows` rows of `cols`: weight row `r % w_period` of `w`.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm<'k>(
        &'k self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        out: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        w_period: usize,
        eps: f32,
    ) -> Result<Step<'k>, GpuError> {
        let words = [u(rows)?, u(cols)?, u(w_period)?, eps.to_bits()];
        Ok(self.step(gpu, &self.rmsnorm, &[x, w, out], &words, grid(rows)?))
    }

    /// `x += y` over `n` floats.
    pub fn add<'k>(
        &'k self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step<'k>, GpuError> {
        Ok(self.step(gpu, &self.add, &[x, y], &[u(n)?], grid_threads(n)?))
    }

    /// `out = a · SiLU(b)` over `n` floats.
    pub fn gate_silu<'k>(
        &'k self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step<'k>, GpuError> {
        Ok(self.step(
            gpu,
            &self.gate_silu,
            &[a, b, out],
            &[u(n)?],
            grid_threads(n)?,
        ))
    }

    /// Causal depthwise conv + bias + SiLU of `channels` input columns starting at
    /// `in_offset` in rows of `in_stride`, into `out` `[t][channels]`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv<'k>(
        &'k self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        in_offset: usize,
        in_stride: usize,
        weight: &wgpu::Buffer,
        bias: &wgpu::Buffer,
        out: &wgpu::Buffer,
        t: usize,
        channels: usize,
        width: usize,
    ) -> Result<Step<'k>, GpuError> {
        let words = [u(t)?, u(channels)?, u(width)?, u(in_offset)?, u(in_stride)?];
        let groups = grid_threads(t * channels)?;
        Ok(self.step(gpu, &self.conv, &[inp, weight, bias, out], &words, groups))
    }

    /// The final conv state `[channels][width]` of the same input as [`Kernels::conv`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv_state<'k>(
        &'k self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        in_offset: usize,
        in_stride: usize,
        state: &wgpu::Buffer,
        t: usize,
        channels: usize,
        width: usize,
    ) -> Result<Step<'k>, GpuError> {
        let words = [u(t)?, u(channels)?, u(width)?, u(in_offset)?, u(in_stride)?];
        let groups = grid_threads(channels * width)?;
        Ok(self.step(gpu, &self.conv_state, &[inp, state], &words, groups))
    }

    /// Mamba-2 q = C, k = B `[t][qk_heads][n]` from the conv output.
    #[allow(clippy::too_many_arguments)]
    pub fn mamba2_qk<'k>(
        &'k self,
        gpu: &Gpu,
        xbc: &wgpu::Buffer,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        t: usize,
        qk_heads: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let words = [
            u(t)?,
            u(qk_heads)?,
            u(shape.n)?,
            u(shape.d_inner())?,
            u(shape.groups)?,
            u(shape.heads / shape.groups)?,
            u(shape.conv_channels())?,
        ];
        let groups = grid_threads(t * qk_heads * shape.n)?;
        Ok(self.step(gpu, &self.mamba2_qk, &[xbc, q, k], &words, groups))
    }

    /// Mamba-2 v, g and λ `[t][heads](…)` from the in_proj and conv outputs.
    #[allow(clippy::too_many_arguments)]
    pub fn mamba2_pre<'k>(
        &'k self,
        gpu: &Gpu,
        zx: &wgpu::Buffer,
        xbc: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        v: &wgpu::Buffer,
        g: &wgpu::Buffer,
        lam: &wgpu::Buffer,
        t: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let words = [
            u(t)?,
            u(shape.heads)?,
            u(shape.p)?,
            u(shape.d_inner())?,
            u(shape.conv_channels())?,
            u(shape.in_rows())?,
            u(shape.lambda_cols())?,
            u32::from(shape.log_linear),
        ];
        let groups = grid_threads(t * shape.heads)?;
        Ok(self.step(
            gpu,
            &self.mamba2_pre,
            &[zx, xbc, vecs, v, g, lam],
            &words,
            groups,
        ))
    }

    /// Mamba-2 `y = (o + D·xs)·SiLU(z)` `[t][d_inner]`.
    #[allow(clippy::too_many_arguments)]
    pub fn mamba2_post<'k>(
        &'k self,
        gpu: &Gpu,
        o: &wgpu::Buffer,
        xbc: &wgpu::Buffer,
        zx: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        y: &wgpu::Buffer,
        t: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let words = [
            u(t)?,
            u(shape.heads)?,
            u(shape.p)?,
            u(shape.d_inner())?,
            u(shape.conv_channels())?,
            u(shape.in_rows())?,
        ];
        let groups = grid_threads(t * shape.d_inner())?;
        Ok(self.step(
            gpu,
            &self.mamba2_post,
            &[o, xbc, zx, vecs, y],
            &words,
            groups,
        ))
    }

    /// GDN q_used, k_used, v `[t][heads][…]` from the conv output.
    #[allow(clippy::too_many_arguments)]
    pub fn gdn_qkv<'k>(
        &'k self,
        gpu: &Gpu,
        qkv: &wgpu::Buffer,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        t: usize,
        heads: usize,
        dk: usize,
        dv: usize,
    ) -> Result<Step<'k>, GpuError> {
        // As the decoder computes it: 1 / sqrt(dk) in f32.
        let q_scale = 1.0 / (dk as f32).sqrt();
        let words = [
            u(t)?,
            u(heads)?,
            u(dk)?,
            u(dv)?,
            u(heads * (2 * dk + dv))?,
            q_scale.to_bits(),
        ];
        let groups = grid_threads(t * heads)?;
        Ok(self.step(gpu, &self.gdn_qkv, &[qkv, q, k, v], &words, groups))
    }

    /// GDN β, g and λ `[t][heads](…)` from `abl = [a | b | l_proj x]` rows of `abl_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn gdn_gates<'k>(
        &'k self,
        gpu: &Gpu,
        abl: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        beta: &wgpu::Buffer,
        g: &wgpu::Buffer,
        lam: &wgpu::Buffer,
        t: usize,
        heads: usize,
        lambda_cols: usize,
        abl_stride: usize,
        log_linear: bool,
        dk: usize,
    ) -> Result<Step<'k>, GpuError> {
        let lam_scale = (dk as f32).sqrt();
        let words = [
            u(t)?,
            u(heads)?,
            u(lambda_cols)?,
            u(abl_stride)?,
            u32::from(log_linear),
            lam_scale.to_bits(),
        ];
        let groups = grid_threads(t * heads)?;
        Ok(self.step(
            gpu,
            &self.gdn_gates,
            &[abl, vecs, beta, g, lam],
            &words,
            groups,
        ))
    }
}

/// The Mamba-2 sizes the kernels need.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2Shape {
    pub heads: usize,
    /// head_dim P (dv).
    pub p: usize,
    /// state_size N (dk).
    pub n: usize,
    pub groups: usize,
    pub log_linear: bool,
    /// λ columns of the model (15, or 0 for plain).
    pub lambda_levels: usize,
}

impl Mamba2Shape {
    pub fn d_inner(&self) -> usize {
        self.heads * self.p
    }
    pub fn conv_channels(&self) -> usize {
        self.d_inner() + 2 * self.groups * self.n
    }
    pub fn in_rows(&self) -> usize {
        self.d_inner() + self.conv_channels() + self.heads + self.heads * self.lambda_levels
    }
    /// λ columns the scan reads: 15, or 1 (all ones) for plain models.
    pub fn lambda_cols(&self) -> usize {
        self.lambda_levels.max(1)
    }
}
