//! The training kernels (forward ops that keep what their backward needs, and every backward),
//! compiled once, and the [`Step`]s that bind them to buffers. Rows are whatever the caller
//! lays out; the model uses (t, b) order, token-major and batch-minor, so that the previous
//! token of row r is row r − B.
//!
//! Every builder checks nothing about buffer sizes beyond what wgpu checks: the model that
//! calls them sizes its buffers from one config.

use crate::gpu::MAX_GROUPS;
use crate::gpu::{Gpu, GpuError, Kernel};

const COMMON: &str = include_str!("../shaders/common.wgsl");

/// Output tile of the training matmul.
const TILE: usize = 64;
/// Split-k matmuls: split when there are fewer output tiles than this (and aim for about
/// this many workgroups), ...
const SPLIT_TILES: usize = 128;
/// ... keep at least this much of k per split, ...
const SPLIT_MIN_K: usize = 512;
/// ... and at most this many splits, whose partials fit the scratch of this many floats.
const MAX_SPLITS: usize = 64;
const SPLIT_FLOATS: usize = 1 << 22;

/// One op: one dispatch or a few in order (a split-k matmul and its sum), bound once and
/// encoded as often as wanted.
pub struct Step {
    parts: Vec<Dispatch>,
}

struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    groups: [u32; 3],
    // Keeps the uniform block alive with the bind group.
    _params: wgpu::Buffer,
}

impl Step {
    /// Records the op into `encoder` (a compute pass of its own).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: None,
        });
        self.record(&mut pass);
    }

    /// Records the op into an open pass.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.parts {
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &d.bind, &[]);
            pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
        }
    }
}

/// Records `steps` in order into one compute pass (each dispatch sees the previous ones'
/// writes).
pub fn encode_all<'a>(
    encoder: &mut wgpu::CommandEncoder,
    steps: impl IntoIterator<Item = &'a Step>,
) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("train"),
        timestamp_writes: None,
    });
    for s in steps {
        s.record(&mut pass);
    }
}

pub(crate) fn u(n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).map_err(|_| GpuError::Invalid(format!("size {n} does not fit in 32 bits")))
}

/// A 2-D grid of `n` workgroups (shaders rebuild the flat index row by row).
pub(crate) fn grid(n: usize) -> Result<[u32; 3], GpuError> {
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

pub(crate) fn grid_threads(n: usize) -> Result<[u32; 3], GpuError> {
    grid(n.div_ceil(256))
}

/// One operand of [`TrainKernels::matmul`]: element (i, j) at `off + i·rs + j·cs`.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Operand<'a> {
    /// Row-major with rows of `stride` floats, starting at float `off`.
    pub fn rows(buf: &'a wgpu::Buffer, off: usize, stride: usize) -> Self {
        Self {
            buf,
            off,
            rs: stride,
            cs: 1,
        }
    }

    /// The transpose of [`Operand::rows`].
    pub fn cols(buf: &'a wgpu::Buffer, off: usize, stride: usize) -> Self {
        Self {
            buf,
            off,
            rs: 1,
            cs: stride,
        }
    }
}

/// Every training kernel.
pub struct TrainKernels {
    matmul: Kernel,
    split_sum: Kernel,
    /// Partials of split-k matmuls (shared: the steps run one after another).
    split_scratch: wgpu::Buffer,
    rmsnorm: Kernel,
    rmsnorm_bwd: Kernel,
    colsum: Kernel,
    embed_fwd: Kernel,
    embed_bwd: Kernel,
    loss_fwd: Kernel,
    loss_bwd: Kernel,
    masked_loss_fwd: Kernel,
    masked_loss_bwd: Kernel,
    shift_targets: Kernel,
    pack_inputs: Kernel,
    conv: Kernel,
    conv_bwd: Kernel,
    conv_bwd_w: Kernel,
    qkv: Kernel,
    gates: Kernel,
    gate_silu: Kernel,
    add: Kernel,
}

impl TrainKernels {
    /// Compiles every kernel.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let k = |label: &str, src: &str, entry: &str| {
            gpu.kernel(label, &format!("{COMMON}\n{src}"), entry)
        };
        let embed = include_str!("../shaders/train_embed.wgsl");
        let loss = include_str!("../shaders/train_loss.wgsl");
        let masked = include_str!("../shaders/train_loss_masked.wgsl");
        let targets = include_str!("../shaders/train_targets.wgsl");
        Ok(Self {
            matmul: k(
                "train_matmul",
                include_str!("../shaders/train_matmul.wgsl"),
                "main",
            )?,
            split_sum: k(
                "train_split_sum",
                include_str!("../shaders/train_split_sum.wgsl"),
                "main",
            )?,
            split_scratch: gpu.storage_zeroed("split-k partials", 4 * SPLIT_FLOATS as u64)?,
            rmsnorm: k(
                "train_rmsnorm",
                include_str!("../shaders/train_rmsnorm.wgsl"),
                "main",
            )?,
            rmsnorm_bwd: k(
                "train_rmsnorm_bwd",
                include_str!("../shaders/train_rmsnorm_bwd.wgsl"),
                "main",
            )?,
            colsum: k(
                "train_colsum",
                include_str!("../shaders/train_colsum.wgsl"),
                "main",
            )?,
            embed_fwd: k("train_embed_fwd", embed, "forward")?,
            embed_bwd: k("train_embed_bwd", embed, "backward")?,
            loss_fwd: k("train_loss_fwd", loss, "forward")?,
            loss_bwd: k("train_loss_bwd", loss, "backward")?,
            masked_loss_fwd: k("train_loss_masked_fwd", masked, "forward")?,
            masked_loss_bwd: k("train_loss_masked_bwd", masked, "backward")?,
            shift_targets: k("train_shift_targets", targets, "shift")?,
            pack_inputs: k("train_pack_inputs", targets, "pack")?,
            conv: k(
                "train_conv",
                include_str!("../shaders/train_conv.wgsl"),
                "main",
            )?,
            conv_bwd: k(
                "train_conv_bwd",
                include_str!("../shaders/train_conv_bwd.wgsl"),
                "main",
            )?,
            conv_bwd_w: k(
                "train_conv_bwd_w",
                include_str!("../shaders/train_conv_bwd_w.wgsl"),
                "main",
            )?,
            qkv: k(
                "train_qkv",
                include_str!("../shaders/train_qkv.wgsl"),
                "main",
            )?,
            gates: k(
                "train_gates",
                include_str!("../shaders/train_gates.wgsl"),
                "main",
            )?,
            gate_silu: k(
                "train_gate_silu",
                include_str!("../shaders/train_gate_silu.wgsl"),
                "main",
            )?,
            add: k(
                "train_add",
                include_str!("../shaders/train_add.wgsl"),
                "main",
            )?,
        })
    }

    fn dispatch(
        gpu: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        words: &[u32],
        groups: [u32; 3],
    ) -> Dispatch {
        let mut block = [0u32; 16];
        block[..words.len()].copy_from_slice(words);
        let params = gpu.uniform_from(&kernel.label, &block);
        let mut all: Vec<&wgpu::Buffer> = buffers.to_vec();
        all.push(&params);
        Dispatch {
            pipeline: kernel.pipeline.clone(),
            bind: gpu.bind(kernel, &all),
            groups,
            _params: params,
        }
    }

    /// One bound dispatch as a [`Step`] (also the Mamba-2 kernels' way to bind theirs).
    pub(crate) fn step(
        gpu: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        words: &[u32],
        groups: [u32; 3],
    ) -> Step {
        Step {
            parts: vec![Self::dispatch(gpu, kernel, buffers, words, groups)],
        }
    }

    /// `C[m][n] = (acc ? C : 0) + Σ_k A(m, k)·B(k, n)`, C rows of `c_stride` from float `c_off`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        gpu: &Gpu,
        m: usize,
        n: usize,
        k: usize,
        a: Operand<'_>,
        b: Operand<'_>,
        c: &wgpu::Buffer,
        c_off: usize,
        c_stride: usize,
        acc: bool,
    ) -> Result<Step, GpuError> {
        let gy = m.div_ceil(TILE);
        let gx = n.div_ceil(TILE);
        if gx > MAX_GROUPS || gy > MAX_GROUPS {
            return Err(GpuError::Invalid(format!(
                "matmul {m}×{n} is over the grid limit"
            )));
        }
        // Split k when there are too few output tiles to fill a GPU and k is long (the weight
        // gradients: k = every token), keeping ≥ SPLIT_MIN_K of k per split.
        let tiles = gx * gy;
        let splits = if tiles < SPLIT_TILES && k >= 2 * SPLIT_MIN_K {
            (SPLIT_TILES.div_ceil(tiles))
                .min(k / SPLIT_MIN_K)
                .min(SPLIT_FLOATS / (m * n).max(1))
                .min(MAX_SPLITS)
        } else {
            1
        };
        let kz = if splits > 1 {
            k.div_ceil(splits).next_multiple_of(16)
        } else {
            k
        };
        let splits = k.div_ceil(kz.max(1)).max(1);
        let (c_buf, part_off, part_stride, z_stride, part_acc) = if splits > 1 {
            (&self.split_scratch, 0, n, m * n, false)
        } else {
            (c, c_off, c_stride, 0, acc)
        };
        let words = [
            u(m)?,
            u(n)?,
            u(k)?,
            u(a.off)?,
            u(a.rs)?,
            u(a.cs)?,
            u(b.off)?,
            u(b.rs)?,
            u(b.cs)?,
            u(part_off)?,
            u(part_stride)?,
            u32::from(part_acc),
            u(kz)?,
            u(z_stride)?,
        ];
        let mut parts = vec![Self::dispatch(
            gpu,
            &self.matmul,
            &[a.buf, b.buf, c_buf],
            &words,
            [gx as u32, gy as u32, splits as u32],
        )];
        if splits > 1 {
            let sum_words = [
                u(m)?,
                u(n)?,
                u(splits)?,
                u(c_off)?,
                u(c_stride)?,
                u32::from(acc),
            ];
            parts.push(Self::dispatch(
                gpu,
                &self.split_sum,
                &[&self.split_scratch, c],
                &sum_words,
                grid_threads(m * n)?,
            ));
        }
        Ok(Step { parts })
    }

    /// Forward of a linear layer `Y = X·Wᵀ`: X rows of `x_stride` (first `in_dim` columns from
    /// `x_off`), W `[out_dim][in_dim]`, Y columns `[y_off, y_off + out_dim)` of rows of `y_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &self,
        gpu: &Gpu,
        rows: usize,
        in_dim: usize,
        out_dim: usize,
        x: &wgpu::Buffer,
        x_off: usize,
        x_stride: usize,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        y_off: usize,
        y_stride: usize,
    ) -> Result<Step, GpuError> {
        self.matmul(
            gpu,
            rows,
            out_dim,
            in_dim,
            Operand::rows(x, x_off, x_stride),
            Operand::cols(w, 0, in_dim),
            y,
            y_off,
            y_stride,
            false,
        )
    }

    /// The two backward products of [`TrainKernels::linear`] with the same layouts:
    /// `dX (+)= dY·W` (added when `acc_dx`) and `dW += dYᵀ·X`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_backward(
        &self,
        gpu: &Gpu,
        rows: usize,
        in_dim: usize,
        out_dim: usize,
        x: &wgpu::Buffer,
        x_off: usize,
        x_stride: usize,
        w: &wgpu::Buffer,
        dw: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dy_off: usize,
        dy_stride: usize,
        dx: &wgpu::Buffer,
        dx_off: usize,
        dx_stride: usize,
        acc_dx: bool,
    ) -> Result<[Step; 2], GpuError> {
        let dx_step = self.matmul(
            gpu,
            rows,
            in_dim,
            out_dim,
            Operand::rows(dy, dy_off, dy_stride),
            Operand::rows(w, 0, in_dim),
            dx,
            dx_off,
            dx_stride,
            acc_dx,
        )?;
        let dw_step = self.matmul(
            gpu,
            out_dim,
            in_dim,
            rows,
            Operand::cols(dy, dy_off, dy_stride),
            Operand::rows(x, x_off, x_stride),
            dw,
            0,
            in_dim,
            true,
        )?;
        Ok([dx_step, dw_step])
    }

    /// RMSNorm of `rows` rows of `cols` with weight `w` (`cols`), keeping `rstd` per row.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        out: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, eps.to_bits(), 0];
        Ok(Self::step(
            gpu,
            &self.rmsnorm,
            &[x, w, out, rstd],
            &words,
            grid(rows)?,
        ))
    }

    /// RMSNorm backward: `dx` (written, or added when `acc`) and the per-row shares of dw in
    /// `wrow` `[rows][cols]` (sum them with [`TrainKernels::colsum`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_backward(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        wrow: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        acc: bool,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, 0, u32::from(acc)];
        Ok(Self::step(
            gpu,
            &self.rmsnorm_bwd,
            &[x, w, rstd, dy, dx, wrow],
            &words,
            grid(rows)?,
        ))
    }

    /// `out[c] += Σ_r inp[in_off + r·stride + c]` for `c < cols`, `r < rows`.
    #[allow(clippy::too_many_arguments)]
    pub fn colsum(
        &self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        in_off: usize,
        stride: usize,
        rows: usize,
        cols: usize,
        out: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, u(stride)?, u(in_off)?];
        Ok(Self::step(
            gpu,
            &self.colsum,
            &[inp, out],
            &words,
            grid(cols)?,
        ))
    }

    /// Embedding forward `x[r] = E[id(r)]` for windows `tokens` `[batch][t+1]`, rows (t, b).
    #[allow(clippy::too_many_arguments)]
    pub fn embed(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        e: &wgpu::Buffer,
        x: &wgpu::Buffer,
        t: usize,
        batch: usize,
        d: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(d)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.embed_fwd,
            &[tokens, e, x],
            &words,
            grid_threads(t * batch * d)?,
        ))
    }

    /// Embedding backward `dE[v] += Σ_{id(r) = v} dx[r]`.
    #[allow(clippy::too_many_arguments)]
    pub fn embed_backward(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        de: &wgpu::Buffer,
        t: usize,
        batch: usize,
        d: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(d)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.embed_bwd,
            &[tokens, dx, de],
            &words,
            grid(vocab)?,
        ))
    }

    /// Cross-entropy forward: `lse` per row and `loss` `[batch][t]`.
    #[allow(clippy::too_many_arguments)]
    pub fn loss(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        loss: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.loss_fwd,
            &[tokens, logits, lse, loss, scale],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Cross-entropy backward: `dlogits = scale[0]·(softmax − onehot(target))`.
    #[allow(clippy::too_many_arguments)]
    pub fn loss_backward(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        dlogits: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.loss_bwd,
            &[tokens, logits, lse, dlogits, scale],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Cross-entropy forward against explicit `targets` `[batch][t]` (u32, `u32::MAX` =
    /// ignored: loss 0, correct 0): `lse` per row, `loss` and `correct` `[batch][t]` (1.0 where
    /// the first largest logit is the target).
    #[allow(clippy::too_many_arguments)]
    pub fn masked_loss(
        &self,
        gpu: &Gpu,
        targets: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        loss: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        correct: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.masked_loss_fwd,
            &[targets, logits, lse, loss, scale, correct],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Backward of [`TrainKernels::masked_loss`]: `dlogits = scale[0]·(softmax − onehot)`,
    /// zero on ignored rows.
    #[allow(clippy::too_many_arguments)]
    pub fn masked_loss_backward(
        &self,
        gpu: &Gpu,
        targets: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        dlogits: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        correct: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.masked_loss_bwd,
            &[targets, logits, lse, dlogits, scale, correct],
            &words,
            grid(t * batch)?,
        ))
    }

    /// `targets[b][t] = windows[b][t + 1]` for windows `[batch][t + 1]`.
    pub fn shift_targets(
        &self,
        gpu: &Gpu,
        windows: &wgpu::Buffer,
        targets: &wgpu::Buffer,
        t: usize,
        batch: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.shift_targets,
            &[windows, targets],
            &[u(t)?, u(batch)?],
            grid_threads(t * batch)?,
        ))
    }

    /// `windows[b][t] = inputs[b][t]` for t < `t`, 0 in each window's last slot.
    pub fn pack_inputs(
        &self,
        gpu: &Gpu,
        inputs: &wgpu::Buffer,
        windows: &wgpu::Buffer,
        t: usize,
        batch: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.pack_inputs,
            &[inputs, windows],
            &[u(t)?, u(batch)?],
            grid_threads((t + 1) * batch)?,
        ))
    }

    /// Short conv + SiLU forward on channels `[c0, c0 + channels)` of rows of `stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        w: &wgpu::Buffer,
        pre: &wgpu::Buffer,
        out: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.conv,
            &[inp, w, pre, out],
            &shape.words()?,
            grid_threads(shape.rows * shape.channels)?,
        ))
    }

    /// Short conv backward, input side: `din` written on the same channels.
    pub fn conv_backward(
        &self,
        gpu: &Gpu,
        pre: &wgpu::Buffer,
        dout: &wgpu::Buffer,
        w: &wgpu::Buffer,
        din: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.conv_bwd,
            &[pre, dout, w, din],
            &shape.words()?,
            grid_threads(shape.rows * shape.channels)?,
        ))
    }

    /// Short conv backward, weight side: `dw += …` (`width` ≤ 8).
    pub fn conv_backward_w(
        &self,
        gpu: &Gpu,
        pre: &wgpu::Buffer,
        dout: &wgpu::Buffer,
        inp: &wgpu::Buffer,
        dw: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        if shape.width > 8 {
            return Err(GpuError::Invalid(format!(
                "conv width {} is over the training kernel's 8",
                shape.width
            )));
        }
        Ok(Self::step(
            gpu,
            &self.conv_bwd_w,
            &[pre, dout, inp, dw],
            &shape.words()?,
            grid(shape.channels)?,
        ))
    }

    /// GDN q_used, k_used, v from the conv output (forward), or the conv-output gradient from
    /// theirs (backward: `q`, `k`, `v` hold dq_used, dk_used, dv; `dx` is written).
    #[allow(clippy::too_many_arguments)]
    pub fn qkv(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        rows: usize,
        heads: usize,
        dk: usize,
        dv: usize,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let q_scale = 1.0 / (dk as f32).sqrt();
        let words = [
            u(rows)?,
            u(heads)?,
            u(dk)?,
            u(dv)?,
            u(heads * (2 * dk + dv))?,
            q_scale.to_bits(),
            u32::from(backward),
        ];
        Ok(Self::step(
            gpu,
            &self.qkv,
            &[dx, x, q, k, v],
            &words,
            grid_threads(rows * heads)?,
        ))
    }

    /// GDN gates forward (β, g, λ written) or backward (`beta`, `g`, `lam` hold their
    /// gradients; `dabl` and the parameter shares `prow` `[rows][2H + 15H]` written).
    #[allow(clippy::too_many_arguments)]
    pub fn gates(
        &self,
        gpu: &Gpu,
        io: GateIo<'_>,
        shape: GateShape,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let lam_scale = (shape.dk as f32).sqrt();
        let words = [
            u(shape.rows)?,
            u(shape.heads)?,
            u(shape.lambda_cols)?,
            u(shape.abl_stride)?,
            u32::from(shape.log_linear),
            lam_scale.to_bits(),
            u32::from(backward),
            u(shape.levels)?,
        ];
        Ok(Self::step(
            gpu,
            &self.gates,
            &[
                io.abl, io.dt_bias, io.a_log, io.l_scale, io.beta, io.g, io.lam, io.dabl, io.prow,
            ],
            &words,
            grid_threads(shape.rows * shape.heads)?,
        ))
    }

    /// `out = a·SiLU(b)` (forward), or `da`, `db` from `dout` in `out` (backward).
    #[allow(clippy::too_many_arguments)]
    pub fn gate_silu(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        da: &wgpu::Buffer,
        db: &wgpu::Buffer,
        n: usize,
        backward: bool,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.gate_silu,
            &[a, b, out, da, db],
            &[u(n)?, u32::from(backward)],
            grid_threads(n)?,
        ))
    }

    /// `out = a + b` over `n` floats.
    pub fn add(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.add,
            &[a, b, out],
            &[u(n)?],
            grid_threads(n)?,
        ))
    }
}

/// Sizes of one short-conv dispatch: `rows` rows (t, b) of `stride` floats, channels
/// `[c0, c0 + channels)`, `batch` sequences, kernel `width`.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub rows: usize,
    pub batch: usize,
    pub stride: usize,
    pub c0: usize,
    pub channels: usize,
    pub width: usize,
}

impl ConvShape {
    fn words(&self) -> Result<[u32; 6], GpuError> {
        Ok([
            u(self.rows)?,
            u(self.batch)?,
            u(self.stride)?,
            u(self.c0)?,
            u(self.channels)?,
            u(self.width)?,
        ])
    }
}

/// Buffers of the gates kernel (see train_gates.wgsl).
pub struct GateIo<'a> {
    pub abl: &'a wgpu::Buffer,
    pub dt_bias: &'a wgpu::Buffer,
    pub a_log: &'a wgpu::Buffer,
    /// L `[H][15]`; any buffer for plain models.
    pub l_scale: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
    pub dabl: &'a wgpu::Buffer,
    pub prow: &'a wgpu::Buffer,
}

/// Sizes of the gates kernel.
#[derive(Clone, Copy, Debug)]
pub struct GateShape {
    pub rows: usize,
    pub heads: usize,
    /// λ columns of the operator's lam buffer.
    pub lambda_cols: usize,
    pub abl_stride: usize,
    pub log_linear: bool,
    pub dk: usize,
    /// Levels the operator reads (λ columns ≥ this get no gradient).
    pub levels: usize,
}
