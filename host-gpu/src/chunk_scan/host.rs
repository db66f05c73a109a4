//! The chunk scan from host values: the inputs' lengths checked against the shape and
//! uploaded ([`ScanInputs`]), the device buffers of one run ([`ScanBuffers`]), and the
//! convenience runners for tests and benchmarks ([`run_scan`]).

use super::{ChunkScan, Form, ScanIo, ScanKernels, ScanLimits, ScanShape, ScanStrategy};
use crate::gpu::{Gpu, GpuError};

/// The operator's inputs on the host, in the layouts of [`ScanIo`] (`beta`: GDN only, may be
/// empty for Mamba-2), for the convenience runners ([`run_scan`] and the backwards' in
/// [`crate::grad`]).
#[derive(Clone, Copy, Debug)]
pub struct ScanInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub lam: &'a [f32],
}

impl ScanInputs<'_> {
    /// Checks each slice's length against `s` (β only for GDN); `what` names the run in the
    /// error.
    fn check_lens(&self, what: &str, s: &ScanShape) -> Result<(), GpuError> {
        let (nqk, nh) = (s.t * s.qk_heads * s.dk, s.t * s.heads);
        let beta = (s.form == Form::Gdn).then_some(("beta", self.beta.len(), nh));
        let lens = [
            ("q", self.q.len(), nqk),
            ("k", self.k.len(), nqk),
            ("v", self.v.len(), nh * s.dv),
            ("g", self.g.len(), nh),
        ]
        .into_iter()
        .chain(beta)
        .chain([("lam", self.lam.len(), nh * s.lambda_cols)]);
        for (name, got, want) in lens {
            if got != want {
                return Err(GpuError::Invalid(format!(
                    "{what}: `{name}` has {got} values, the shape needs {want}"
                )));
            }
        }
        Ok(())
    }

    /// After [`Self::check_lens`], q, k, v, g, beta (one float 0 where empty: Mamba-2), lam on
    /// the device, in that order.
    pub(crate) fn upload(
        &self,
        gpu: &Gpu,
        what: &str,
        s: &ScanShape,
    ) -> Result<[wgpu::Buffer; 6], GpuError> {
        self.check_lens(what, s)?;
        let up = |label: &str, x: &[f32]| gpu.storage_from(label, x);
        let beta = if self.beta.is_empty() {
            &[0.0f32][..]
        } else {
            self.beta
        };
        Ok([
            up("q", self.q)?,
            up("k", self.k)?,
            up("v", self.v)?,
            up("g", self.g)?,
            up("beta", beta)?,
            up("lam", self.lam)?,
        ])
    }
}

/// Convenience for tests and benchmarks: upload, run, read back `(o, state)`, with the strategy
/// [`ScanStrategy::from_env`] picks.
pub fn run_scan(
    gpu: &Gpu,
    shape: ScanShape,
    inputs: &ScanInputs<'_>,
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    run_scan_with_strategy(gpu, shape, ScanStrategy::from_env(), inputs)
}

/// [`run_scan`] with an explicit strategy.
pub fn run_scan_with_strategy(
    gpu: &Gpu,
    shape: ScanShape,
    strategy: ScanStrategy,
    inputs: &ScanInputs<'_>,
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    shape.validate()?;
    let kernels = ScanKernels::new(gpu, shape.form)?;
    let bufs = ScanBuffers::new(gpu, &shape, inputs)?;
    let scan = ChunkScan::with_strategy(gpu, &kernels, shape, bufs.io(), strategy)?;
    let mut enc = gpu.encoder("chunk scan");
    scan.encode(&mut enc);
    gpu.submit_and_wait(enc)?;
    bufs.read(gpu)
}

/// The device buffers of a scan from host values ([`run_scan`], benchmarks): the inputs
/// uploaded, `o` and `state` zeroed. Mamba-2's `beta` may be empty (one float is bound).
pub struct ScanBuffers {
    /// q, k, v, g, beta, lam.
    inputs: [wgpu::Buffer; 6],
    o: wgpu::Buffer,
    state: wgpu::Buffer,
    o_len: usize,
    state_len: usize,
}

impl ScanBuffers {
    /// Checks each slice's length against `shape` (β only for GDN), then uploads.
    pub fn new(gpu: &Gpu, shape: &ScanShape, inputs: &ScanInputs<'_>) -> Result<Self, GpuError> {
        let s = shape;
        let o_len = s.t * s.heads * s.dv;
        let state_len = s.levels * s.heads * s.dk * s.dv;
        Ok(Self {
            inputs: inputs.upload(gpu, "chunk scan", s)?,
            o: gpu.storage_zeroed("o", (o_len * 4) as u64)?,
            state: gpu.storage_zeroed("state", (state_len * 4) as u64)?,
            o_len,
            state_len,
        })
    }

    /// The buffers as a scan's bindings.
    pub fn io(&self) -> ScanIo<'_> {
        let [q, k, v, g, beta, lam] = &self.inputs;
        ScanIo {
            q,
            k,
            v,
            g,
            beta,
            lam,
            o: &self.o,
            state: Some(&self.state),
        }
    }

    /// `(o, state)` as they are in the buffers.
    pub fn read(&self, gpu: &Gpu) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        let mut o = gpu.read_f32(&self.o)?;
        o.truncate(self.o_len);
        let mut state = gpu.read_f32(&self.state)?;
        state.truncate(self.state_len);
        Ok((o, state))
    }
}
