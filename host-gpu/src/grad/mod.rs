//! Backward passes of the chunkwise operator (spec §7.4), in WGSL, for training.
//!
//! Both forms take the forward's inputs and the upstream gradient `d_o` and write the gradients
//! of L = Σ o·d_o with respect to every input. They recompute what they need of the forward
//! (γ, the per-level states H_c) instead of keeping it, so a training step holds no scan scratch
//! between its forward and its backward. dλ is accumulated per row and level (no float atomics),
//! so results are deterministic.

use crate::chunk_scan::{check_buffer, Form, ScanInputs, ScanLimits, ScanShape};
use crate::gpu::{Gpu, GpuError};

pub mod op_gdn;
pub mod op_m2;

/// Buffers of one operator backward. All f32, token-major, the layouts of
/// [`crate::chunk_scan::ScanIo`]: q, k `[T][heads][dk]` (q and k per head: `qk_heads == heads`);
/// v, d_o `[T][heads][dv]`; g, beta `[T][heads]` (beta: GDN only, any non-empty buffer for
/// Mamba-2); lam `[T][heads][lambda_cols]`.
/// The gradients are written (overwritten, not accumulated) in the same layouts: dq, dk, dv, dg,
/// dbeta (GDN; untouched for Mamba-2), dlam (0 in the columns no token reads).
pub struct OpGradIo<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
    pub d_o: &'a wgpu::Buffer,
    pub dq: &'a wgpu::Buffer,
    pub dk: &'a wgpu::Buffer,
    pub dv: &'a wgpu::Buffer,
    pub dg: &'a wgpu::Buffer,
    pub dbeta: &'a wgpu::Buffer,
    pub dlam: &'a wgpu::Buffer,
}

impl OpGradIo<'_> {
    /// Checks that every buffer holds what `s` needs (β and dβ: GDN only); `op` names the
    /// backward in the error.
    pub(crate) fn check(&self, op: &str, s: &ScanShape) -> Result<(), GpuError> {
        let [nqk, nv, ng, nl] = floats(s);
        let gdn = s.form == Form::Gdn;
        let inputs = [
            ("q", self.q, nqk),
            ("k", self.k, nqk),
            ("v", self.v, nv),
            ("g", self.g, ng),
        ];
        let rest = [
            ("lam", self.lam, nl),
            ("d_o", self.d_o, nv),
            ("dq", self.dq, nqk),
            ("dk", self.dk, nqk),
            ("dv", self.dv, nv),
            ("dg", self.dg, ng),
        ];
        let all = inputs
            .into_iter()
            .chain(gdn.then_some(("beta", self.beta, ng)))
            .chain(rest)
            .chain(gdn.then_some(("dbeta", self.dbeta, ng)))
            .chain([("dlam", self.dlam, nl)]);
        for (name, buf, n) in all {
            check_buffer(op, name, buf, n)?;
        }
        Ok(())
    }
}

/// Floats of the backward's tensors for `s`: q and k (and dq, dk); v and d_o (and dv); one per
/// (token, head): g, β (and theirs); λ (and dλ).
fn floats(s: &ScanShape) -> [usize; 4] {
    let th = s.t * s.heads;
    [th * s.dk, th * s.dv, th, th * s.lambda_cols]
}

/// Gradients read back by the convenience runners (`run_backward` of each form).
#[derive(Clone, Debug, Default)]
pub struct OpGrads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub dg: Vec<f32>,
    /// Empty for Mamba-2.
    pub dbeta: Vec<f32>,
    pub dlam: Vec<f32>,
}

/// The device buffers of one operator backward run from host values (the `run_backward`
/// convenience of each form, benchmarks): the forward's inputs and `d_o` uploaded, the
/// gradients zeroed. Mamba-2 reads no β (an empty one is bound as one float) and writes no dβ
/// (one float).
pub struct HostBuffers {
    /// q, k, v, g, beta, lam.
    inputs: [wgpu::Buffer; 6],
    d_o: wgpu::Buffer,
    /// dq, dk, dv, dg, dbeta, dlam.
    grads: [wgpu::Buffer; 6],
    shape: ScanShape,
}

impl HostBuffers {
    /// Checks the shape ([`check_training_shape`]) and each slice's length against it (β only
    /// for GDN), then uploads.
    pub fn new(
        gpu: &Gpu,
        shape: &ScanShape,
        inputs: &ScanInputs<'_>,
        d_o: &[f32],
    ) -> Result<Self, GpuError> {
        check_training_shape(shape)?;
        let s = shape;
        let has_beta = s.form == Form::Gdn;
        let what = if has_beta {
            "GDN backward"
        } else {
            "Mamba-2 backward"
        };
        let [nqk, nv, ng, nl] = floats(s);
        if d_o.len() != nv {
            return Err(GpuError::Invalid(format!(
                "{what}: `d_o` has {} values, the shape needs {nv}",
                d_o.len()
            )));
        }
        let zeroed = |label: &str, n: usize| gpu.storage_zeroed(label, (n * 4) as u64);
        let dbeta = if has_beta {
            zeroed("dbeta", ng)?
        } else {
            zeroed("dbeta (unused)", 1)?
        };
        Ok(Self {
            inputs: inputs.upload(gpu, what, s)?,
            d_o: gpu.storage_from("d_o", d_o)?,
            grads: [
                zeroed("dq", nqk)?,
                zeroed("dk", nqk)?,
                zeroed("dv", nv)?,
                zeroed("dg", ng)?,
                dbeta,
                zeroed("dlam", nl)?,
            ],
            shape: *s,
        })
    }

    /// The buffers as a backward's bindings.
    pub fn io(&self) -> OpGradIo<'_> {
        let [q, k, v, g, beta, lam] = &self.inputs;
        let [dq, dk, dv, dg, dbeta, dlam] = &self.grads;
        OpGradIo {
            q,
            k,
            v,
            g,
            beta,
            lam,
            d_o: &self.d_o,
            dq,
            dk,
            dv,
            dg,
            dbeta,
            dlam,
        }
    }

    /// Runs what `encode` records (one submission, waited for), then reads the gradients back
    /// (`dbeta` empty for Mamba-2).
    pub fn run(
        &self,
        gpu: &Gpu,
        label: &str,
        encode: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<OpGrads, GpuError> {
        let mut enc = gpu.encoder(label);
        encode(&mut enc);
        gpu.submit_and_wait(enc)?;
        self.read(gpu)
    }

    /// The gradients as they are in the buffers (`dbeta` empty for Mamba-2).
    pub fn read(&self, gpu: &Gpu) -> Result<OpGrads, GpuError> {
        let read = |b: &wgpu::Buffer, n: usize| -> Result<Vec<f32>, GpuError> {
            let mut x = gpu.read_f32(b)?;
            x.truncate(n);
            Ok(x)
        };
        let [nqk, nv, ng, nl] = floats(&self.shape);
        let [dq, dk, dv, dg, dbeta, dlam] = &self.grads;
        Ok(OpGrads {
            dq: read(dq, nqk)?,
            dk: read(dk, nqk)?,
            dv: read(dv, nv)?,
            dg: read(dg, ng)?,
            dbeta: if self.shape.form == Form::Gdn {
                read(dbeta, ng)?
            } else {
                Vec::new()
            },
            dlam: read(dlam, nl)?,
        })
    }
}

/// Training shapes are exact: every level a token can read has its own λ column and state, no
/// saturated top level (plain models pass λ = 1 in as many columns). Checks that, and that q
/// and k are per head.
pub fn check_training_shape(shape: &ScanShape) -> Result<(), GpuError> {
    shape.validate()?;
    let needed_levels = loglinear_runtime::exact_levels(shape.t as u64);
    if shape.levels < needed_levels || shape.lambda_cols < needed_levels {
        return Err(GpuError::Invalid(format!(
            "operator backward: T = {} needs {needed_levels} exact levels and λ columns \
             (got levels {}, lambda_cols {})",
            shape.t, shape.levels, shape.lambda_cols
        )));
    }
    if shape.qk_heads != shape.heads {
        return Err(GpuError::Invalid(format!(
            "operator backward: q and k must be per head (qk_heads {} != heads {})",
            shape.qk_heads, shape.heads
        )));
    }
    Ok(())
}
