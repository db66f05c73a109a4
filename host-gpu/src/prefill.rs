//! Whole-model GPU prefill: T tokens through every layer in one batched pass per layer, ending
//! in the recurrent state (Fenwick levels and conv states) that the CPU runtime's [`Session`]
//! continues decoding from.
//!
//! Per layer: RMSNorm → mixer (projections, short conv, pre-scan ops, chunk scan, post-scan ops,
//! output projection) → residual → RMSNorm → SwiGLU MLP → residual, each op a kernel over all
//! T tokens. Buffers and bind groups are made once per prefill and shared by all layers; the
//! scan's final state and the conv state of each layer are copied into whole-model buffers laid
//! out as [`Session::states`] and [`Session::conv_states`].

use crate::gpu::{Gpu, GpuError, Rows};
use crate::ops::{
    encode_steps, ConvShape, GdnGatesIo, GdnQkvIo, GdnShape, Kernels, Mamba2PostIo, Mamba2PreIo,
    Mamba2QkIo, Mamba2Shape, NormShape, Step,
};
use crate::scan_link::{ScanBuffers, ScanDims, ScanForm, ScanLink};
use crate::weights::{GpuMixer, GpuWeights};
use loglinear_runtime::{
    LevelPolicy, Model, ModelConfig, Session, SessionError, StateElem, LAMBDA_LEVELS,
};
use std::collections::BTreeMap;
use std::time::Instant;

/// The result of a prefill: the decoder state after the last token and the logits.
#[derive(Clone, Debug)]
pub struct Prefill {
    /// Tokens consumed.
    pub t: usize,
    /// State levels per layer.
    pub levels: usize,
    /// Every layer's Fenwick state, `[layer][levels][heads][dk][dv]` ([`Session::states`]).
    pub states: Vec<f32>,
    /// Every layer's conv state, `[layer][channels][W]` ([`Session::conv_states`]).
    pub conv: Vec<f32>,
    /// Next-token logits after the last token.
    pub last_logits: Vec<f32>,
    /// Logits at every position `[T][vocab]`, when asked for.
    pub all_logits: Option<Vec<f32>>,
    /// The residual stream after each block, `[layer][T][D]`, when asked for.
    pub hidden: Option<Vec<Vec<f32>>>,
    /// Wall time from recording the work to the GPU finishing it (read-back excluded).
    pub gpu_seconds: f64,
    /// With [`PrefillOptions::profile`]: seconds per phase, summed over layers.
    pub phases: Vec<(&'static str, f64)>,
}

impl Prefill {
    /// Hands the state and the last logits to a CPU session of the same model (narrowed to
    /// f16 if the session stores f16): the session is then where stepping all `t` tokens would
    /// have left it. The session must have been made with the same number of levels.
    pub fn load_into<E: StateElem>(
        &self,
        session: &mut Session<'_, E>,
    ) -> Result<(), SessionError> {
        let states: Vec<E> = self.states.iter().map(|&x| E::store(x)).collect();
        session.load_state(self.t as u64, &states, &self.conv)?;
        session.load_logits(&self.last_logits)
    }
}

/// What a prefill returns besides the state and the last logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillOptions {
    /// State levels (as `SessionConfig::levels`: 2..=15 for log-linear models, 1 for plain).
    pub levels: usize,
    /// Logits at every position, not only the last.
    pub all_logits: bool,
    /// The residual stream after every block.
    pub hidden: bool,
    /// Wait for the GPU after each phase of each layer and time the phases
    /// ([`Prefill::phases`]); slower overall, for finding where the time goes.
    pub profile: bool,
}

/// One mixer run on given inputs, for checking a layer against references: the output and
/// the intermediates under the golden files' names (`T<n>.inter.*`).
#[derive(Clone, Debug)]
pub struct MixerTrace {
    pub y_mixer: Vec<f32>,
    pub inter: BTreeMap<&'static str, Vec<f32>>,
}

/// A model on the GPU: weights uploaded and kernels compiled once, then any number of
/// prefills.
pub struct GpuModel<'g> {
    gpu: &'g Gpu,
    config: ModelConfig,
    weights: GpuWeights,
    kernels: Kernels,
    scan: ScanLink,
}

/// Every activation buffer of one prefill of `t` tokens.
struct Buffers {
    t: usize,
    ids: wgpu::Buffer,
    /// Residual stream `[T][D]`.
    x: wgpu::Buffer,
    /// Normed residual `[T][D]` (mixer / MLP input).
    h: wgpu::Buffer,
    /// Mixer or MLP output `[T][D]`.
    out: wgpu::Buffer,
    /// Mamba-2 in_proj output `[T][in_rows]`; GDN q|k|v projections `[T][conv_channels]`.
    proj: wgpu::Buffer,
    proj_stride: usize,
    /// Conv output `[T][conv_channels]`.
    conv_out: wgpu::Buffer,
    /// GDN `[T][a (H) | b (H) | l (H·15)]`.
    abl: wgpu::Buffer,
    abl_stride: usize,
    /// GDN g_proj output `[T][value_dim]`.
    gate: wgpu::Buffer,
    scan: ScanBuffers,
    /// Post-scan `[T][d_inner]`: Mamba-2 gated y / GDN normed o, then the final mixer input.
    y: wgpu::Buffer,
    y_norm: wgpu::Buffer,
    /// Final conv state of the current layer `[channels][W]`.
    conv_state: wgpu::Buffer,
    mlp_gate: wgpu::Buffer,
    mlp_up: wgpu::Buffer,
    mlp_act: wgpu::Buffer,
    states_all: wgpu::Buffer,
    conv_all: wgpu::Buffer,
    hidden_all: Option<wgpu::Buffer>,
    logits: wgpu::Buffer,
}

/// What [`GpuModel::mixer_steps`] makes: the kernel steps before and after the scan.
struct MixerSteps<'k> {
    before_scan: Vec<Step<'k>>,
    after_scan: Vec<Step<'k>>,
}

fn f32_bytes(n: usize) -> u64 {
    4 * n as u64
}

impl<'g> GpuModel<'g> {
    /// Uploads `model`'s weights and compiles every kernel.
    pub fn new(gpu: &'g Gpu, model: &Model<'_>) -> Result<Self, GpuError> {
        let config = *model.config();
        Ok(Self {
            gpu,
            config,
            weights: GpuWeights::upload(gpu, model)?,
            kernels: Kernels::new(gpu)?,
            scan: ScanLink::new(
                gpu,
                if config.arch.is_mamba2() {
                    ScanForm::Mamba2
                } else {
                    ScanForm::Gdn
                },
            )?,
        })
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Prefills `tokens` with `levels` state levels; all-position logits if asked.
    pub fn prefill(
        &self,
        tokens: &[u32],
        levels: usize,
        want_all_logits: bool,
    ) -> Result<Prefill, GpuError> {
        self.prefill_with(
            tokens,
            &PrefillOptions {
                levels,
                all_logits: want_all_logits,
                hidden: false,
                profile: false,
            },
        )
    }

    /// Prefills `tokens` with `session`'s number of levels and hands the state to it: the
    /// session then continues decoding after the last token, and its `logits()` are the prompt's
    /// last logits. `session` must be a session of this model.
    pub fn prefill_into<E: StateElem>(
        &self,
        tokens: &[u32],
        session: &mut Session<'_, E>,
    ) -> Result<Prefill, GpuError> {
        let p = self.prefill(tokens, session.policy().levels(), false)?;
        p.load_into(session)
            .map_err(|e| GpuError::Invalid(format!("handing the state to the session: {e}")))?;
        Ok(p)
    }

    fn check_levels(&self, levels: usize) -> Result<(), GpuError> {
        let ok = if self.config.arch.is_log_linear() {
            (2..=LAMBDA_LEVELS).contains(&levels)
        } else {
            levels == 1
        };
        if !ok || LevelPolicy::new(levels).is_none() {
            return Err(GpuError::Invalid(format!(
                "invalid number of state levels {levels}: plain models take 1, log-linear 2..={LAMBDA_LEVELS}"
            )));
        }
        Ok(())
    }

    fn scan_dims(&self, t: usize, levels: usize) -> ScanDims {
        let c = &self.config;
        let mamba = c.arch.is_mamba2();
        ScanDims {
            form: if mamba {
                ScanForm::Mamba2
            } else {
                ScanForm::Gdn
            },
            t,
            heads: c.num_heads,
            qk_heads: if mamba && c.num_groups == 1 {
                1
            } else {
                c.num_heads
            },
            dk: c.head_k_dim,
            dv: c.head_v_dim,
            lambda_cols: c.lambda_levels.max(1),
            levels,
        }
    }

    fn mamba2_shape(&self) -> Mamba2Shape {
        let c = &self.config;
        Mamba2Shape {
            heads: c.num_heads,
            p: c.head_v_dim,
            n: c.head_k_dim,
            groups: c.num_groups,
            log_linear: c.arch.is_log_linear(),
            lambda_levels: c.lambda_levels,
        }
    }

    fn buffers(
        &self,
        t: usize,
        levels: usize,
        logit_rows: usize,
        hidden: bool,
    ) -> Result<Buffers, GpuError> {
        let c = &self.config;
        let g = self.gpu;
        let z = |label: &str, n: usize| g.storage_zeroed(label, f32_bytes(n));
        let (h, d, vd) = (c.num_heads, c.hidden_size, c.d_inner());
        let proj_stride = if c.arch.is_mamba2() {
            c.in_proj_rows()
        } else {
            c.conv_channels()
        };
        let abl_stride = 2 * h + h * c.lambda_levels;
        let dims = self.scan_dims(t, levels);
        let state_per_layer = levels * h * c.head_k_dim * c.head_v_dim;
        let conv_per_layer = c.conv_channels() * c.conv_kernel;
        let gdn = !c.arch.is_mamba2();
        Ok(Buffers {
            t,
            ids: z("ids", t)?,
            x: z("x", t * d)?,
            h: z("h", t * d)?,
            out: z("out", t * d)?,
            proj: z("proj", t * proj_stride)?,
            proj_stride,
            conv_out: z("conv_out", t * c.conv_channels())?,
            abl: z("abl", if gdn { t * abl_stride } else { 1 })?,
            abl_stride,
            gate: z("gate", if gdn { t * vd } else { 1 })?,
            scan: ScanBuffers::new(g, &dims)?,
            y: z("y", t * vd)?,
            y_norm: z("y_norm", t * vd)?,
            conv_state: z("conv_state", conv_per_layer)?,
            mlp_gate: z("mlp_gate", t * c.intermediate_size)?,
            mlp_up: z("mlp_up", t * c.intermediate_size)?,
            mlp_act: z("mlp_act", t * c.intermediate_size)?,
            states_all: z("states", state_per_layer * c.num_layers)?,
            conv_all: z("conv_states", conv_per_layer * c.num_layers)?,
            hidden_all: if hidden {
                Some(z("hidden", c.num_layers * t * d)?)
            } else {
                None
            },
            logits: z("logits", logit_rows * c.vocab_size)?,
        })
    }

    /// The mixer of `layer` from `b.h` into `b.out`; the scan runs between the two step lists.
    fn mixer_steps(&self, layer: usize, b: &Buffers) -> Result<MixerSteps<'_>, GpuError> {
        let c = &self.config;
        let (g, k) = (self.gpu, &self.kernels);
        let t = b.t;
        let s = &b.scan;
        let (heads, d, vd) = (c.num_heads, c.hidden_size, c.d_inner());
        let w = &self.weights.layers[layer];
        let mut before = Vec::new();
        let mut after = Vec::new();
        let h = Rows::new(&b.h, 0, d);
        let (y_norm, out) = (Rows::new(&b.y_norm, 0, vd), Rows::new(&b.out, 0, d));
        match &w.mixer {
            GpuMixer::Mamba2(m) => {
                let sh = self.mamba2_shape();
                let ch = sh.conv_channels();
                let rows = sh.in_rows();
                let conv_shape = ConvShape {
                    t,
                    channels: ch,
                    width: c.conv_kernel,
                };
                // The conv reads the xBC columns of in_proj's output.
                let xbc_in = Rows::new(&b.proj, vd, rows);
                before.push(k.matmul(g, &m.in_proj, h, Rows::new(&b.proj, 0, rows), t)?);
                before.push(k.conv(g, xbc_in, &m.conv, &m.conv_bias, &b.conv_out, conv_shape)?);
                before.push(k.conv_state(g, xbc_in, &b.conv_state, conv_shape)?);
                let qk_heads = self.scan_dims(t, 1).qk_heads;
                let qk_io = Mamba2QkIo {
                    xbc: &b.conv_out,
                    q: &s.q,
                    k: &s.k,
                };
                before.push(k.mamba2_qk(g, qk_io, t, qk_heads, &sh)?);
                let pre_io = Mamba2PreIo {
                    zx: &b.proj,
                    xbc: &b.conv_out,
                    vecs: &m.vecs,
                    v: &s.v,
                    g: &s.g,
                    lam: &s.lam,
                };
                before.push(k.mamba2_pre(g, pre_io, t, &sh)?);
                let post_io = Mamba2PostIo {
                    o: &s.o,
                    xbc: &b.conv_out,
                    zx: &b.proj,
                    vecs: &m.vecs,
                    y: &b.y,
                };
                after.push(k.mamba2_post(g, post_io, t, &sh)?);
                let gs = c.norm_group_size;
                let gated_norm = NormShape {
                    rows: t * vd / gs,
                    cols: gs,
                    w_period: vd / gs,
                    eps: c.norm_eps,
                };
                after.push(k.rmsnorm(g, &b.y, &m.norm, &b.y_norm, gated_norm)?);
                after.push(k.matmul(g, &m.out_proj, y_norm, out, t)?);
            }
            GpuMixer::Gdn(m) => {
                let sh = GdnShape {
                    heads,
                    dk: c.head_k_dim,
                    dv: c.head_v_dim,
                    lambda_cols: c.lambda_levels.max(1),
                    abl_stride: b.abl_stride,
                    log_linear: c.arch.is_log_linear(),
                };
                let kd = c.key_dim();
                let ch = c.conv_channels();
                let proj = |off| Rows::new(&b.proj, off, ch);
                let abl = |off| Rows::new(&b.abl, off, sh.abl_stride);
                let conv_shape = ConvShape {
                    t,
                    channels: ch,
                    width: c.conv_kernel,
                };
                before.push(k.matmul(g, &m.q_proj, h, proj(0), t)?);
                before.push(k.matmul(g, &m.k_proj, h, proj(kd), t)?);
                before.push(k.matmul(g, &m.v_proj, h, proj(2 * kd), t)?);
                before.push(k.conv(g, proj(0), &m.conv, &m.conv_bias, &b.conv_out, conv_shape)?);
                before.push(k.conv_state(g, proj(0), &b.conv_state, conv_shape)?);
                let qkv_io = GdnQkvIo {
                    qkv: &b.conv_out,
                    q: &s.q,
                    k: &s.k,
                    v: &s.v,
                };
                before.push(k.gdn_qkv(g, qkv_io, t, &sh)?);
                before.push(k.matmul(g, &m.a_proj, h, abl(0), t)?);
                before.push(k.matmul(g, &m.b_proj, h, abl(heads), t)?);
                if let Some(lp) = &m.l_proj {
                    before.push(k.matmul(g, lp, h, abl(2 * heads), t)?);
                }
                let gates_io = GdnGatesIo {
                    abl: &b.abl,
                    vecs: &m.vecs,
                    beta: &s.beta,
                    g: &s.g,
                    lam: &s.lam,
                };
                before.push(k.gdn_gates(g, gates_io, t, &sh)?);
                before.push(k.matmul(g, &m.g_proj, h, Rows::new(&b.gate, 0, vd), t)?);
                let o_norm = NormShape {
                    rows: t * heads,
                    cols: sh.dv,
                    w_period: 1,
                    eps: c.norm_eps,
                };
                after.push(k.rmsnorm(g, &s.o, &m.o_norm, &b.y, o_norm)?);
                after.push(k.gate_silu(g, &b.y, &b.gate, &b.y_norm, t * vd)?);
                after.push(k.matmul(g, &m.o_proj, y_norm, out, t)?);
            }
        }
        Ok(MixerSteps {
            before_scan: before,
            after_scan: after,
        })
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), GpuError> {
        if tokens.is_empty() {
            return Err(GpuError::Invalid("prefill needs at least one token".into()));
        }
        let v = self.config.vocab_size;
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= v) {
            return Err(GpuError::Invalid(format!(
                "token {bad} out of range (vocabulary {v})"
            )));
        }
        Ok(())
    }

    /// Prefills `tokens` with the outputs `opts` asks for.
    pub fn prefill_with(&self, tokens: &[u32], opts: &PrefillOptions) -> Result<Prefill, GpuError> {
        self.check_tokens(tokens)?;
        self.check_levels(opts.levels)?;
        let c = &self.config;
        let (g, k) = (self.gpu, &self.kernels);
        let t = tokens.len();
        let d = c.hidden_size;
        let logit_rows = if opts.all_logits { t } else { 1 };
        let b = self.buffers(t, opts.levels, logit_rows, opts.hidden)?;
        g.write(&b.ids, tokens);
        let scan = self
            .scan
            .scan(g, &self.scan_dims(t, opts.levels), &b.scan)?;
        let state_bytes = f32_bytes(opts.levels * c.num_heads * c.head_k_dim * c.head_v_dim);
        let conv_bytes = f32_bytes(c.conv_channels() * c.conv_kernel);
        let hidden_bytes = f32_bytes(t * d);

        // Every step, made before anything is encoded.
        let embed = k.gather(g, &self.weights.embedding, &b.ids, t, &b.x)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        // Every token's hidden state, one weight row for all.
        let token_norm = NormShape {
            rows: t,
            cols: d,
            w_period: 1,
            eps: c.norm_eps,
        };
        let im = c.intermediate_size;
        let h = Rows::new(&b.h, 0, d);
        let (mlp_gate, mlp_up) = (Rows::new(&b.mlp_gate, 0, im), Rows::new(&b.mlp_up, 0, im));
        let (mlp_act, out) = (Rows::new(&b.mlp_act, 0, im), Rows::new(&b.out, 0, d));
        for (l, w) in self.weights.layers.iter().enumerate() {
            let norm1 = k.rmsnorm(g, &b.x, &w.mixer_norm, &b.h, token_norm)?;
            let mixer = self.mixer_steps(l, &b)?;
            let mlp = vec![
                k.add(g, &b.x, &b.out, t * d)?,
                k.rmsnorm(g, &b.x, &w.mlp_norm, &b.h, token_norm)?,
                k.matmul(g, &w.gate, h, mlp_gate, t)?,
                k.matmul(g, &w.up, h, mlp_up, t)?,
                k.gate_silu(g, &b.mlp_up, &b.mlp_gate, &b.mlp_act, t * im)?,
                k.matmul(g, &w.down, mlp_act, out, t)?,
                k.add(g, &b.x, &b.out, t * d)?,
            ];
            layers.push((norm1, mixer, mlp));
        }
        let final_norm = k.rmsnorm(g, &b.x, &self.weights.final_norm, &b.h, token_norm)?;
        let head_from = (t - logit_rows) * d;
        let last_rows = Rows::new(&b.h, head_from, d);
        let logits = Rows::new(&b.logits, 0, c.vocab_size);
        let lm_head = k.matmul(g, &self.weights.lm_head, last_rows, logits, logit_rows)?;

        let mut phases: Vec<(&'static str, f64)> = [
            "pre-scan ops",
            "chunk scan",
            "post-scan ops and MLP",
            "final norm and LM head",
        ]
        .iter()
        .map(|&name| (name, 0.0))
        .collect();
        // When profiling, submit what was recorded so far and charge its time to `phase`.
        let cut = |enc: &mut wgpu::CommandEncoder,
                   phases: &mut Vec<(&'static str, f64)>,
                   phase: usize|
         -> Result<(), GpuError> {
            if opts.profile {
                let done = std::mem::replace(enc, g.encoder("prefill"));
                let start = Instant::now();
                g.submit_and_wait(done)?;
                phases[phase].1 += start.elapsed().as_secs_f64();
            }
            Ok(())
        };
        let start = Instant::now();
        let mut enc = g.encoder("prefill");
        for (l, (norm1, mixer, mlp)) in layers.iter().enumerate() {
            let first = (l == 0).then_some(&embed);
            let pre = first.into_iter().chain([norm1]).chain(&mixer.before_scan);
            encode_steps(&mut enc, "pre-scan", pre);
            cut(&mut enc, &mut phases, 0)?;
            scan.encode(&mut enc);
            cut(&mut enc, &mut phases, 1)?;
            encode_steps(&mut enc, "post-scan", mixer.after_scan.iter().chain(mlp));
            enc.copy_buffer_to_buffer(
                &b.scan.state,
                0,
                &b.states_all,
                l as u64 * state_bytes,
                state_bytes,
            );
            enc.copy_buffer_to_buffer(
                &b.conv_state,
                0,
                &b.conv_all,
                l as u64 * conv_bytes,
                conv_bytes,
            );
            if let Some(hb) = &b.hidden_all {
                enc.copy_buffer_to_buffer(&b.x, 0, hb, l as u64 * hidden_bytes, hidden_bytes);
            }
            cut(&mut enc, &mut phases, 2)?;
        }
        encode_steps(&mut enc, "head", [&final_norm, &lm_head]);
        cut(&mut enc, &mut phases, 3)?;
        g.submit_and_wait(enc)?;
        let gpu_seconds = start.elapsed().as_secs_f64();
        if !opts.profile {
            phases.clear();
        }

        let read = |buf: &wgpu::Buffer, n: usize| -> Result<Vec<f32>, GpuError> {
            let bytes = g.read_bytes(buf, f32_bytes(n))?;
            Ok(bytemuck::pod_collect_to_vec(&bytes))
        };
        let v = c.vocab_size;
        let logits = read(&b.logits, logit_rows * v)?;
        let hidden = match &b.hidden_all {
            Some(hb) => {
                let all = read(hb, c.num_layers * t * d)?;
                Some(all.chunks_exact(t * d).map(<[f32]>::to_vec).collect())
            }
            None => None,
        };
        Ok(Prefill {
            t,
            levels: opts.levels,
            states: read(&b.states_all, (state_bytes / 4) as usize * c.num_layers)?,
            conv: read(&b.conv_all, (conv_bytes / 4) as usize * c.num_layers)?,
            last_logits: logits[(logit_rows - 1) * v..].to_vec(),
            all_logits: opts.all_logits.then_some(logits),
            hidden,
            gpu_seconds,
            phases,
        })
    }

    /// Runs only the mixer of `layer` on inputs `x` (`[T][D]`, already normed) with the
    /// model's default levels, returning its output and intermediates. With `o_override` the
    /// scan is skipped and its output replaced by the given `[T][H][dv]` values (to check the
    /// post-scan ops alone).
    pub fn mixer_trace(
        &self,
        layer: usize,
        x: &[f32],
        o_override: Option<&[f32]>,
    ) -> Result<MixerTrace, GpuError> {
        let c = &self.config;
        let d = c.hidden_size;
        if layer >= c.num_layers || x.is_empty() || x.len() % d != 0 {
            return Err(GpuError::Invalid(
                "mixer_trace: bad layer or input shape".into(),
            ));
        }
        let t = x.len() / d;
        let levels = c.default_state_levels();
        let g = self.gpu;
        let b = self.buffers(t, levels, 1, false)?;
        g.write(&b.h, x);
        let steps = self.mixer_steps(layer, &b)?;
        let mut enc = g.encoder("mixer");
        for s in &steps.before_scan {
            s.encode(&mut enc);
        }
        match o_override {
            Some(o) => {
                if o.len() != t * c.d_inner() {
                    return Err(GpuError::Invalid(
                        "mixer_trace: o has the wrong size".into(),
                    ));
                }
                g.write(&b.scan.o, o);
            }
            None => self
                .scan
                .scan(g, &self.scan_dims(t, levels), &b.scan)?
                .encode(&mut enc),
        }
        for s in &steps.after_scan {
            s.encode(&mut enc);
        }
        g.submit_and_wait(enc)?;

        let read = |buf: &wgpu::Buffer, n: usize| -> Result<Vec<f32>, GpuError> {
            let bytes = g.read_bytes(buf, f32_bytes(n))?;
            Ok(bytemuck::pod_collect_to_vec(&bytes))
        };
        // Columns [from, from + n) of a [T][stride] buffer.
        let cols = |all: &[f32], stride: usize, from: usize, n: usize| -> Vec<f32> {
            all.chunks_exact(stride)
                .flat_map(|r| r[from..from + n].iter().copied())
                .collect()
        };
        let (h, vd, kd) = (c.num_heads, c.d_inner(), c.key_dim());
        let lc = c.lambda_levels.max(1);
        let dims = self.scan_dims(t, levels);
        let mut inter = BTreeMap::new();
        let proj = read(&b.proj, t * b.proj_stride)?;
        let conv = read(&b.conv_out, t * c.conv_channels())?;
        inter.insert("g", read(&b.scan.g, t * h)?);
        inter.insert("o", read(&b.scan.o, t * vd)?);
        let lam = read(&b.scan.lam, t * h * lc)?;
        if c.arch.is_mamba2() {
            let ch = c.conv_channels();
            let gn = c.num_groups * c.head_k_dim;
            let rows = b.proj_stride;
            inter.insert("z", cols(&proj, rows, 0, vd));
            inter.insert("xBC", cols(&proj, rows, vd, ch));
            inter.insert("dt_raw", cols(&proj, rows, vd + ch, h));
            if c.arch.is_log_linear() {
                inter.insert("dl", cols(&proj, rows, vd + ch + h, h * c.lambda_levels));
                inter.insert("lam", lam);
            }
            inter.insert("xs", cols(&conv, ch, 0, vd));
            if dims.qk_heads == 1 {
                // What the scan reads: k = B, q = C of the single group.
                inter.insert("B", read(&b.scan.k, t * gn)?);
                inter.insert("C", read(&b.scan.q, t * gn)?);
            } else {
                inter.insert("B", cols(&conv, ch, vd, gn));
                inter.insert("C", cols(&conv, ch, vd + gn, gn));
            }
            inter.insert("y_norm", read(&b.y_norm, t * vd)?);
        } else {
            let ch = c.conv_channels();
            inter.insert("q", cols(&conv, ch, 0, kd));
            inter.insert("k", cols(&conv, ch, kd, kd));
            inter.insert("v", cols(&conv, ch, 2 * kd, vd));
            inter.insert("q_used", read(&b.scan.q, t * kd)?);
            inter.insert("k_used", read(&b.scan.k, t * kd)?);
            inter.insert("beta", read(&b.scan.beta, t * h)?);
            if c.arch.is_log_linear() {
                inter.insert("lam_used", lam);
            }
            inter.insert("o_gated", read(&b.y_norm, t * vd)?);
        }
        Ok(MixerTrace {
            y_mixer: read(&b.out, t * d)?,
            inter,
        })
    }
}
