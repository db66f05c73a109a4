//! The weights of a model on the GPU, uploaded once.
//!
//! Matrices keep the storage type they have in the model (F32, F16, Q8_0, Q4_0) and are
//! dequantized inside the matmul and gather shaders, so a quantized model costs as little GPU
//! memory as it does RAM. Every matrix buffer is a plain word array: F32 as the f32 bits, F16 as
//! two halves per word, Q8_0 / Q4_0 as ggml's raw blocks (34 / 18 bytes, so a block may start
//! in the middle of a word; the shaders address bytes). Small vectors (norms, biases, A_log,
//! dt_bias, D, L, conv weights) are f32.

use crate::gpu::{Gpu, GpuError};
use loglinear_runtime::{DType, Model, ModelConfig, ModelError, TensorData, TensorView};

/// A weight matrix `rows × cols` (out × in) in its own storage type.
pub struct GpuMatrix {
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    pub buf: wgpu::Buffer,
}

impl GpuMatrix {
    /// Uploads `view` as it is stored.
    pub fn upload(gpu: &Gpu, label: &str, view: &TensorView<'_>) -> Result<Self, GpuError> {
        let bytes: &[u8] = match view.data {
            TensorData::F32(d) => bytemuck::cast_slice(d),
            TensorData::F16(d) => bytemuck::cast_slice(d),
            TensorData::Q8_0(d) => bytemuck::cast_slice(d),
            TensorData::Q4_0(d) => bytemuck::cast_slice(d),
        };
        Ok(Self {
            rows: view.rows,
            cols: view.cols,
            dtype: view.dtype(),
            buf: gpu.storage_from(label, bytes)?,
        })
    }
}

/// Mamba-2 mixer weights. `vecs` packs the per-head vectors: `[dt_bias H][A_log H][D H][L H·15]`
/// (L only for the log-linear form), see [`MixerVecs`].
pub struct GpuMamba2 {
    pub in_proj: GpuMatrix,
    /// `[conv_channels][W]`.
    pub conv: wgpu::Buffer,
    /// `[conv_channels]`, zeros when the model has no conv bias.
    pub conv_bias: wgpu::Buffer,
    pub vecs: wgpu::Buffer,
    /// `[d_inner]` gated-norm weight.
    pub norm: wgpu::Buffer,
    pub out_proj: GpuMatrix,
}

/// Offsets (in floats) of the per-head vectors inside a mixer's `vecs` buffer.
pub struct MixerVecs;

impl MixerVecs {
    pub const DT_BIAS: usize = 0;
    /// `A_log` starts after `dt_bias` (H floats).
    pub fn a_log(heads: usize) -> usize {
        heads
    }
    /// Mamba-2 `D` (GDN: unused, zeros).
    pub fn d_skip(heads: usize) -> usize {
        2 * heads
    }
    /// `L`, `[H][15]` (zeros for plain models).
    pub fn lambda_scale(heads: usize) -> usize {
        3 * heads
    }
}

/// Gated DeltaNet mixer weights; `vecs` as [`MixerVecs`].
pub struct GpuGdn {
    pub q_proj: GpuMatrix,
    pub k_proj: GpuMatrix,
    pub v_proj: GpuMatrix,
    pub a_proj: GpuMatrix,
    pub b_proj: GpuMatrix,
    pub g_proj: GpuMatrix,
    pub l_proj: Option<GpuMatrix>,
    /// q, k then v conv weights, `[2·key_dim + value_dim][W]` (the session's conv order).
    pub conv: wgpu::Buffer,
    /// Zeros (GDN convs have no bias; the conv kernel always reads one).
    pub conv_bias: wgpu::Buffer,
    pub vecs: wgpu::Buffer,
    /// `[dv]` per-head output-norm weight.
    pub o_norm: wgpu::Buffer,
    pub o_proj: GpuMatrix,
}

/// The mixer of one block.
pub enum GpuMixer {
    Mamba2(Box<GpuMamba2>),
    Gdn(Box<GpuGdn>),
}

/// One block's weights.
pub struct GpuLayer {
    pub mixer_norm: wgpu::Buffer,
    pub mlp_norm: wgpu::Buffer,
    pub mixer: GpuMixer,
    pub gate: GpuMatrix,
    pub up: GpuMatrix,
    pub down: GpuMatrix,
}

/// Every weight of a model, on the GPU.
pub struct GpuWeights {
    pub config: ModelConfig,
    pub embedding: GpuMatrix,
    pub final_norm: wgpu::Buffer,
    pub lm_head: GpuMatrix,
    pub layers: Vec<GpuLayer>,
}

fn model_err(e: ModelError) -> GpuError {
    GpuError::Invalid(format!("model: {e}"))
}

/// The per-head vectors of a mixer packed as [`MixerVecs`] describes.
fn pack_vecs(
    heads: usize,
    dt_bias: &[f32],
    a_log: &[f32],
    d_skip: Option<&[f32]>,
    lambda_scale: Option<&[f32]>,
    lambda_levels: usize,
) -> Vec<f32> {
    let mut v = vec![0f32; 3 * heads + heads * lambda_levels.max(1)];
    v[..heads].copy_from_slice(&dt_bias[..heads]);
    v[heads..2 * heads].copy_from_slice(&a_log[..heads]);
    if let Some(d) = d_skip {
        v[2 * heads..3 * heads].copy_from_slice(&d[..heads]);
    }
    if let Some(l) = lambda_scale {
        v[3 * heads..3 * heads + l.len()].copy_from_slice(l);
    }
    v
}

impl GpuWeights {
    /// Uploads every tensor `model` reads.
    pub fn upload(gpu: &Gpu, model: &Model<'_>) -> Result<Self, GpuError> {
        let c = *model.config();
        let g = model.globals().map_err(model_err)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let lab = |s: &str| format!("layer{l}.{s}");
            let norms = model.norms(l).map_err(model_err)?;
            let mlp = model.mlp(l).map_err(model_err)?;
            let mixer = if c.arch.is_mamba2() {
                let w = model.mamba2(l).map_err(model_err)?;
                let bias = match w.conv_bias {
                    Some(b) => b.to_vec(),
                    None => vec![0.0; c.conv_channels()],
                };
                GpuMixer::Mamba2(Box::new(GpuMamba2 {
                    in_proj: GpuMatrix::upload(gpu, &lab("in_proj"), &w.in_proj)?,
                    conv: gpu.storage_from(&lab("conv"), w.conv)?,
                    conv_bias: gpu.storage_from(&lab("conv_bias"), &bias)?,
                    vecs: gpu.storage_from(
                        &lab("vecs"),
                        &pack_vecs(
                            c.num_heads,
                            w.dt_bias,
                            w.a_log,
                            Some(w.d_skip),
                            w.lambda_scale,
                            c.lambda_levels,
                        ),
                    )?,
                    norm: gpu.storage_from(&lab("norm"), w.norm)?,
                    out_proj: GpuMatrix::upload(gpu, &lab("out_proj"), &w.out_proj)?,
                }))
            } else {
                let w = model.gdn(l).map_err(model_err)?;
                let conv: Vec<f32> = [w.q_conv, w.k_conv, w.v_conv].concat();
                GpuMixer::Gdn(Box::new(GpuGdn {
                    q_proj: GpuMatrix::upload(gpu, &lab("q_proj"), &w.q_proj)?,
                    k_proj: GpuMatrix::upload(gpu, &lab("k_proj"), &w.k_proj)?,
                    v_proj: GpuMatrix::upload(gpu, &lab("v_proj"), &w.v_proj)?,
                    a_proj: GpuMatrix::upload(gpu, &lab("a_proj"), &w.a_proj)?,
                    b_proj: GpuMatrix::upload(gpu, &lab("b_proj"), &w.b_proj)?,
                    g_proj: GpuMatrix::upload(gpu, &lab("g_proj"), &w.g_proj)?,
                    l_proj: match &w.l_proj {
                        Some(v) => Some(GpuMatrix::upload(gpu, &lab("l_proj"), v)?),
                        None => None,
                    },
                    conv: gpu.storage_from(&lab("conv"), &conv)?,
                    conv_bias: gpu
                        .storage_zeroed(&lab("conv_bias"), 4 * c.conv_channels() as u64)?,
                    vecs: gpu.storage_from(
                        &lab("vecs"),
                        &pack_vecs(
                            c.num_heads,
                            w.dt_bias,
                            w.a_log,
                            None,
                            w.lambda_scale,
                            c.lambda_levels,
                        ),
                    )?,
                    o_norm: gpu.storage_from(&lab("o_norm"), w.o_norm)?,
                    o_proj: GpuMatrix::upload(gpu, &lab("o_proj"), &w.o_proj)?,
                }))
            };
            layers.push(GpuLayer {
                mixer_norm: gpu.storage_from(&lab("mixer_norm"), norms.mixer)?,
                mlp_norm: gpu.storage_from(&lab("mlp_norm"), norms.mlp)?,
                mixer,
                gate: GpuMatrix::upload(gpu, &lab("mlp_gate"), &mlp.gate)?,
                up: GpuMatrix::upload(gpu, &lab("mlp_up"), &mlp.up)?,
                down: GpuMatrix::upload(gpu, &lab("mlp_down"), &mlp.down)?,
            });
        }
        Ok(Self {
            config: c,
            embedding: GpuMatrix::upload(gpu, "embedding", &g.embedding)?,
            final_norm: gpu.storage_from("final_norm", g.final_norm)?,
            lm_head: GpuMatrix::upload(gpu, "lm_head", &g.lm_head)?,
            layers,
        })
    }
}
