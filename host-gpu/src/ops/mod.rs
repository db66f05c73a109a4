//! The batched layer ops as compute kernels: every op runs over all T tokens at once. Each
//! builder returns a [`Step`] (pipeline, bind group, grid) that records one dispatch; steps are
//! made once per prefill and encoded as often as wanted.
//!
//! Layouts are row-major and token-major (`[T][…]`), as in the CPU runtime. Kernel parameters
//! are small uniform blocks, each a `#[repr(C)]` mirror of its shader's struct.

use crate::gpu::{
    common_wgsl, dispatch, record_dispatch, with_common, CoopMatmul, Gpu, GpuError, Kernel, Rows,
    MAX_GROUPS,
};
pub(crate) use crate::gpu::{grid, grid_threads, u};
use crate::weights::GpuMatrix;
use loglinear_runtime::DType;

mod mixer;

pub use mixer::{
    GdnGatesIo, GdnQkvIo, GdnShape, Mamba2PostIo, Mamba2PreIo, Mamba2QkIo, Mamba2Shape,
};

const F16: &str = include_str!("../shaders/f16.wgsl");
const MATMUL: &str = concat!(
    common_wgsl!("matmul_io"),
    common_wgsl!("rows16"),
    common_wgsl!("tile64"),
    include_str!("../shaders/matmul.wgsl")
);
const MATMUL_COOP: &str = concat!(
    common_wgsl!("matmul_io"),
    include_str!("../shaders/matmul_coop.wgsl")
);
const GATHER: &str = include_str!("../shaders/gather.wgsl");
/// How each weight dtype's kernels read W (binding 0 and `load_w`), in [`dtype_index`] order.
const WEIGHT_ACCESS: [(&str, &str); 4] = [
    ("f32", include_str!("../shaders/weights_f32.wgsl")),
    ("f16", include_str!("../shaders/weights_f16.wgsl")),
    ("q8_0", include_str!("../shaders/weights_q8_0.wgsl")),
    ("q4_0", include_str!("../shaders/weights_q4_0.wgsl")),
];
const RMSNORM: &str = concat!(
    common_wgsl!("norm_rows"),
    common_wgsl!("workgroup_sum"),
    common_wgsl!("inv_rms"),
    include_str!("../shaders/rmsnorm.wgsl")
);
const ADD: &str = include_str!("../shaders/add.wgsl");
const GATE_SILU: &str = include_str!("../shaders/gate_silu.wgsl");
const CONV: &str = include_str!("../shaders/conv.wgsl");
const CONV_STATE: &str = include_str!("../shaders/conv_state.wgsl");

/// `MatmulParams` of matmul.wgsl and matmul_coop.wgsl (one layout).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    x_offset: u32,
    x_stride: u32,
    y_offset: u32,
    y_stride: u32,
    _pad: u32,
}

/// `GatherParams` of gather.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherParams {
    t: u32,
    d: u32,
}

/// `NormParams` of rmsnorm.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct NormParams {
    rows: u32,
    cols: u32,
    w_period: u32,
    eps: f32,
}

/// `AddParams` of add.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AddParams {
    n: u32,
}

/// `GateSiluParams` of gate_silu.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GateSiluParams {
    n: u32,
}

/// `ConvParams` of conv.wgsl and conv_state.wgsl (one layout).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvParams {
    t: u32,
    channels: u32,
    width: u32,
    in_offset: u32,
    in_stride: u32,
}

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
        record_dispatch(pass, &self.kernel.pipeline, &self.bind, self.groups);
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

fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q8_0 => 2,
        DType::Q4_0 => 3,
    }
}

/// A matmul or gather kernel's source for one weight dtype: f16.wgsl, the dtype's weight
/// access (`weights`), then `body`.
fn with_weights(weights: &str, body: &str) -> String {
    format!("{F16}\n{weights}\n{body}")
}

/// The coop matmul kernel's source for one configuration and weight dtype.
fn coop_matmul_source(cfg: &CoopMatmul, weights: &str) -> String {
    format!(
        "{}{}",
        cfg.wgsl_header(),
        with_weights(weights, MATMUL_COOP)
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
        let mut matmul = Vec::new();
        let mut gather = Vec::new();
        for (name, src) in WEIGHT_ACCESS {
            matmul.push(gpu.kernel(
                &format!("matmul_{name}"),
                &with_weights(src, MATMUL),
                "main",
            )?);
            gather.push(gpu.kernel(
                &format!("gather_{name}"),
                &with_weights(src, GATHER),
                "main",
            )?);
        }
        let mut path = MatmulPath::Fp32;
        let mut coop_note = None;
        match gpu.coop_matmul() {
            Some(cfg) if coop => {
                let built: Result<Vec<Kernel>, GpuError> = WEIGHT_ACCESS
                    .iter()
                    .map(|(name, src)| {
                        let source = coop_matmul_source(&cfg, src);
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
        let k = |label: &str, body: &str| gpu.kernel(label, &with_common(body), "main");
        Ok(Self {
            matmul,
            path,
            coop_note,
            gather,
            rmsnorm: k("rmsnorm", RMSNORM)?,
            add: k("add", ADD)?,
            gate_silu: k("gate_silu", GATE_SILU)?,
            conv: k("conv", CONV)?,
            conv_state: k("conv_state", CONV_STATE)?,
            mamba2_qk: k("mamba2_qk", mixer::MAMBA2_QK)?,
            mamba2_pre: k("mamba2_pre", mixer::MAMBA2_PRE)?,
            mamba2_post: k("mamba2_post", mixer::MAMBA2_POST)?,
            gdn_qkv: k("gdn_qkv", mixer::GDN_QKV)?,
            gdn_gates: k("gdn_gates", mixer::GDN_GATES)?,
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

    /// One dispatch of `kernel` with `buffers` at bindings 0.. and `params` (the `#[repr(C)]`
    /// mirror of the kernel's uniform struct) in a uniform block after them.
    fn step<'k, P: bytemuck::Pod>(
        &'k self,
        gpu: &Gpu,
        kernel: &'k Kernel,
        buffers: &[&wgpu::Buffer],
        params: &P,
        groups: [u32; 3],
    ) -> Step<'k> {
        let p = gpu.uniform_from(&kernel.label, params);
        let mut all: Vec<&wgpu::Buffer> = buffers.to_vec();
        all.push(&p);
        Step {
            kernel,
            bind: gpu.bind(kernel, &all),
            groups,
        }
    }

    /// `y(r, n) = Σ_k x(r, k) · W[n][k]` for the `m` rows r of `x` and `y`; W (`n × k`) in its
    /// own storage type.
    pub fn matmul<'k>(
        &'k self,
        gpu: &Gpu,
        w: &GpuMatrix,
        x: Rows<'_>,
        y: Rows<'_>,
        m: usize,
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
        let params = MatmulParams {
            m: u(m)?,
            n: u(w.rows)?,
            k: u(w.cols)?,
            x_offset: u(x.off)?,
            x_stride: u(x.stride)?,
            y_offset: u(y.off)?,
            y_stride: u(y.stride)?,
            _pad: 0,
        };
        let kernel = &self.matmul[dtype_index(w.dtype)];
        Ok(self.step(gpu, kernel, &[&w.buf, x.buf, y.buf], &params, groups))
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
        let params = GatherParams {
            t: u(t)?,
            d: u(w.cols)?,
        };
        Ok(self.step(gpu, kernel, &[&w.buf, ids, out], &params, groups))
    }

    /// RMSNorm of the rows of `x` into `out`, row r with weight row `r % w_period` of `w`.
    pub fn rmsnorm<'k>(
        &'k self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        out: &wgpu::Buffer,
        shape: NormShape,
    ) -> Result<Step<'k>, GpuError> {
        let params = NormParams {
            rows: u(shape.rows)?,
            cols: u(shape.cols)?,
            w_period: u(shape.w_period)?,
            eps: shape.eps,
        };
        let groups = grid(shape.rows)?;
        Ok(self.step(gpu, &self.rmsnorm, &[x, w, out], &params, groups))
    }

    /// `x += y` over `n` floats.
    pub fn add<'k>(
        &'k self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step<'k>, GpuError> {
        let params = AddParams { n: u(n)? };
        Ok(self.step(gpu, &self.add, &[x, y], &params, grid_threads(n)?))
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
        let params = GateSiluParams { n: u(n)? };
        Ok(self.step(
            gpu,
            &self.gate_silu,
            &[a, b, out],
            &params,
            grid_threads(n)?,
        ))
    }

    /// Causal depthwise conv + bias + SiLU of the first `channels` columns of the `t` rows of
    /// `inp`, into `out` `[t][channels]`.
    pub fn conv<'k>(
        &'k self,
        gpu: &Gpu,
        inp: Rows<'_>,
        weight: &wgpu::Buffer,
        bias: &wgpu::Buffer,
        out: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step<'k>, GpuError> {
        let params = shape.params(inp)?;
        let groups = grid_threads(shape.t * shape.channels)?;
        let buffers = [inp.buf, weight, bias, out];
        Ok(self.step(gpu, &self.conv, &buffers, &params, groups))
    }

    /// The final conv state `[channels][width]` of the same input as [`Kernels::conv`].
    pub fn conv_state<'k>(
        &'k self,
        gpu: &Gpu,
        inp: Rows<'_>,
        state: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step<'k>, GpuError> {
        let params = shape.params(inp)?;
        let groups = grid_threads(shape.channels * shape.width)?;
        Ok(self.step(gpu, &self.conv_state, &[inp.buf, state], &params, groups))
    }
}

/// Sizes and ε of one RMSNorm: `rows` rows of `cols`, row r scaled by weight row
/// `r % w_period` (1: one weight row for all).
#[derive(Clone, Copy, Debug)]
pub struct NormShape {
    pub rows: usize,
    pub cols: usize,
    pub w_period: usize,
    pub eps: f32,
}

/// Sizes of one short conv: `t` rows, `channels` columns, kernel `width`.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub t: usize,
    pub channels: usize,
    pub width: usize,
}

impl ConvShape {
    fn params(&self, inp: Rows<'_>) -> Result<ConvParams, GpuError> {
        Ok(ConvParams {
            t: u(self.t)?,
            channels: u(self.channels)?,
            width: u(self.width)?,
            in_offset: u(inp.off)?,
            in_stride: u(inp.stride)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, wgsl_validate};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        for (_, weights) in WEIGHT_ACCESS {
            let matmul = wgsl_uniform_size(&with_weights(weights, MATMUL));
            assert_eq!(size_of::<MatmulParams>(), matmul);
            let gather = wgsl_uniform_size(&with_weights(weights, GATHER));
            assert_eq!(size_of::<GatherParams>(), gather);
        }
        assert_eq!(size_of::<NormParams>(), size(RMSNORM));
        assert_eq!(size_of::<AddParams>(), size(ADD));
        assert_eq!(size_of::<GateSiluParams>(), size(GATE_SILU));
        assert_eq!(size_of::<ConvParams>(), size(CONV));
        assert_eq!(size_of::<ConvParams>(), size(CONV_STATE));
    }

    #[test]
    fn the_coop_matmul_uniform_matches_its_wgsl_struct() {
        // The source for an f16 16×16 configuration, whether or not this adapter has one.
        let cfg = CoopMatmul {
            size: 16,
            input: wgpu::CooperativeScalarType::F16,
            subgroup_size: 32,
        };
        for (_, weights) in WEIGHT_ACCESS {
            let source = coop_matmul_source(&cfg, weights);
            assert_eq!(size_of::<MatmulParams>(), wgsl_uniform_size(&source));
        }
    }

    /// The coop kernels compile only where the adapter has cooperative matrices, which lavapipe
    /// (CI) does not: naga's validator checks their sources here for every configuration the
    /// kernel can be given, as the device would before compiling them.
    #[test]
    fn coop_matmul_sources_validate_for_every_configuration() {
        use wgpu::CooperativeScalarType as T;
        for (input, size, subgroup_size) in [
            (T::F16, 16, 32),
            (T::F16, 8, 32),
            (T::F32, 16, 32),
            (T::F32, 8, 64),
        ] {
            let cfg = CoopMatmul {
                size,
                input,
                subgroup_size,
            };
            for (name, weights) in WEIGHT_ACCESS {
                let what = format!("matmul_coop_{name} for {}", cfg.describe());
                wgsl_validate(&what, &coop_matmul_source(&cfg, weights));
            }
        }
    }
}
