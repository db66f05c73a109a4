//! The operator benchmark: the log-linear operator's forward + backward at the paper's kernel
//! shape, one row per form and T, beside the anchors of the same shape.

use crate::anchors::{Anchors, Best};
use crate::{scoped, wall_ms, Args};
use loglinear_host_gpu::chunk_scan::{ChunkScan, Form, ScanIo, ScanKernels, ScanShape};
use loglinear_host_gpu::grad::op_gdn::GdnBackward;
use loglinear_host_gpu::grad::op_m2::{M2Backward, M2Kernels};
use loglinear_host_gpu::grad::{check_training_shape, OpGradIo};
use loglinear_host_gpu::timestamps::{median, Timestamps};
use loglinear_host_gpu::{wgpu, Gpu, GpuError};
use loglinear_runtime::rng::SplitMix64;

/// Operator inputs and gradients, sized for `tokens` × `heads` rows (the same for every T:
/// only the split of the rows into T × heads·batch changes, and random rows stay random).
struct OpBuffers {
    input: OpInputs,
    o: wgpu::Buffer,
    dq: wgpu::Buffer,
    dk: wgpu::Buffer,
    dv: wgpu::Buffer,
    dg: wgpu::Buffer,
    dbeta: wgpu::Buffer,
    dlam: wgpu::Buffer,
}

/// The inputs of [`OpBuffers`].
struct OpInputs {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    g: wgpu::Buffer,
    beta: wgpu::Buffer,
    lam: wgpu::Buffer,
    d_o: wgpu::Buffer,
}

impl OpInputs {
    /// With zeroed outputs and gradients for `rows` rows.
    fn with_outputs(self, gpu: &Gpu, a: &Args, rows: usize) -> Result<OpBuffers, GpuError> {
        let zeros = |label: &str, floats: usize| gpu.storage_zeroed(label, 4 * floats as u64);
        Ok(OpBuffers {
            o: zeros("o", rows * a.dv)?,
            dq: zeros("dq", rows * a.dk)?,
            dk: zeros("dk", rows * a.dk)?,
            dv: zeros("dv", rows * a.dv)?,
            dg: zeros("dg", rows)?,
            dbeta: zeros("dbeta", rows)?,
            dlam: zeros("dlam", rows * a.levels)?,
            input: self,
        })
    }
}

/// Random inputs shaped like the layers' (q·dk^-½; k l2-normalised (GDN needs it, Mamba-2
/// does not mind); β in (0, 1); g small negative; λ = softplus of a normal-ish value), uploaded
/// one array at a time to keep host memory low.
fn op_buffers(gpu: &Gpu, a: &Args) -> Result<OpBuffers, GpuError> {
    let rows = a.tokens * a.heads;
    let mut rng = SplitMix64::new(0x1234_5678_9abc_def1);
    let scale = 1.0 / (a.dk as f32).sqrt();
    let q: Vec<f32> = (0..rows * a.dk)
        .map(|_| (rng.unit_f32() - 0.5) * scale)
        .collect();
    let q = gpu.storage_from("q", &q)?;
    let mut k: Vec<f32> = (0..rows * a.dk).map(|_| rng.unit_f32() - 0.5).collect();
    for row in k.chunks_mut(a.dk) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        row.iter_mut().for_each(|x| *x /= n);
    }
    let k = gpu.storage_from("k", &k)?;
    let v: Vec<f32> = (0..rows * a.dv).map(|_| rng.unit_f32() - 0.5).collect();
    let v = gpu.storage_from("v", &v)?;
    let d_o: Vec<f32> = (0..rows * a.dv).map(|_| rng.unit_f32() - 0.5).collect();
    let d_o = gpu.storage_from("d_o", &d_o)?;
    let g: Vec<f32> = (0..rows).map(|_| -0.05 * rng.unit_f32() - 1e-3).collect();
    let g = gpu.storage_from("g", &g)?;
    let beta: Vec<f32> = (0..rows).map(|_| 0.05 + 0.9 * rng.unit_f32()).collect();
    let beta = gpu.storage_from("beta", &beta)?;
    let lam: Vec<f32> = (0..rows * a.levels)
        .map(|_| (1.0 + (4.0 * rng.unit_f32() - 2.0).exp()).ln())
        .collect();
    let lam = gpu.storage_from("lam", &lam)?;
    let inputs = OpInputs {
        q,
        k,
        v,
        g,
        beta,
        lam,
        d_o,
    };
    inputs.with_outputs(gpu, a, rows)
}

/// The backward of either form.
enum Backward {
    M2(M2Backward),
    Gdn(GdnBackward),
}

impl Backward {
    fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        match self {
            Backward::M2(b) => b.encode(enc),
            Backward::Gdn(b) => b.encode(enc),
        }
    }
}

/// Kernels of one form, compiled once.
struct FormKernels {
    scan: ScanKernels,
    m2: Option<M2Kernels>,
}

pub struct OpRow {
    pub form: Form,
    pub t: usize,
    pub batch: usize,
    pub result: Result<OpTimes, String>,
    /// The fastest anchors of this form and shape.
    pub best: Best,
}

pub struct OpTimes {
    /// The forward's inter-chunk strategy (`LOGLINEAR_SCAN` picks it).
    pub strategy: &'static str,
    /// Sub-calls over head groups the call was split into (1: all op heads at once).
    pub sub_calls: usize,
    pub fwd: f64,
    pub bwd: f64,
    pub both: f64,
    /// GPU ms of the forward and the backward inside the fwd+bwd submission.
    pub gpu: Option<(f64, f64)>,
    /// The forward's floating-point operations and estimated memory traffic in bytes.
    pub fwd_flops: f64,
    pub fwd_bytes: f64,
}

impl OpTimes {
    /// The forward's ms: GPU time where timestamps gave it, else wall time.
    pub fn fwd_ms(&self) -> f64 {
        self.gpu.map_or(self.fwd, |(f, _)| f)
    }
}

fn op_shape(a: &Args, form: Form, t: usize) -> ScanShape {
    let heads = a.heads * (a.tokens / t);
    ScanShape {
        form,
        t,
        heads,
        qk_heads: heads,
        dk: a.dk,
        dv: a.dv,
        lambda_cols: a.levels,
        levels: a.levels,
    }
}

/// The forward scan and backward of one sub-call, with its own copies of the inputs and its
/// own outputs when the call is split (`None`: the call's buffers themselves).
struct SubCall {
    scan: ChunkScan,
    bwd: Backward,
    _buffers: Option<OpBuffers>,
}

/// The forward scan and backward of `shape` on the buffers `b`.
fn build_call(
    gpu: &Gpu,
    kernels: &FormKernels,
    shape: ScanShape,
    b: &OpBuffers,
) -> Result<(ChunkScan, Backward), GpuError> {
    let scan = ChunkScan::new(
        gpu,
        &kernels.scan,
        shape,
        ScanIo {
            q: &b.input.q,
            k: &b.input.k,
            v: &b.input.v,
            g: &b.input.g,
            beta: &b.input.beta,
            lam: &b.input.lam,
            o: &b.o,
            state: None,
        },
    )?;
    let io = OpGradIo {
        q: &b.input.q,
        k: &b.input.k,
        v: &b.input.v,
        g: &b.input.g,
        beta: &b.input.beta,
        lam: &b.input.lam,
        d_o: &b.input.d_o,
        dq: &b.dq,
        dk: &b.dk,
        dv: &b.dv,
        dg: &b.dg,
        dbeta: &b.dbeta,
        dlam: &b.dlam,
    };
    let bwd = match (&kernels.m2, shape.form) {
        (Some(k), Form::Mamba2) => Backward::M2(M2Backward::with_kernels(gpu, k, shape, io)?),
        _ => Backward::Gdn(GdnBackward::new(gpu, shape, io)?),
    };
    Ok((scan, bwd))
}

/// Inputs of sub-call `index` of a call split into sub-calls of `sub` (T × G rows each):
/// rows index·T·G .. (index + 1)·T·G of the call's inputs, copied once (untimed); outputs
/// zeroed.
fn sub_buffers(
    gpu: &Gpu,
    a: &Args,
    b: &OpBuffers,
    sub: ScanShape,
    index: usize,
) -> Result<OpBuffers, GpuError> {
    let rows = sub.t * sub.heads;
    let mut enc = gpu.encoder("sub-call inputs");
    let mut copy = |label: &str, src: &wgpu::Buffer, width: usize| {
        let bytes = (rows * width * 4) as u64;
        let dst = gpu.storage_zeroed(label, bytes)?;
        enc.copy_buffer_to_buffer(src, index as u64 * bytes, &dst, 0, bytes);
        Ok::<_, GpuError>(dst)
    };
    let q = copy("q", &b.input.q, a.dk)?;
    let k = copy("k", &b.input.k, a.dk)?;
    let v = copy("v", &b.input.v, a.dv)?;
    let g = copy("g", &b.input.g, 1)?;
    let beta = copy("beta", &b.input.beta, 1)?;
    let lam = copy("lam", &b.input.lam, a.levels)?;
    let d_o = copy("d_o", &b.input.d_o, a.dv)?;
    gpu.submit_and_wait(enc)?;
    let inputs = OpInputs {
        q,
        k,
        v,
        g,
        beta,
        lam,
        d_o,
    };
    inputs.with_outputs(gpu, a, rows)
}

/// The call as few sub-calls over head groups as the adapter's limits allow: the forward
/// scan and the backward are independent per operator head (per sequence and head), so n
/// sub-calls of heads / n op heads each (n dividing the op heads) do the same work. Tries
/// n = `--sub-calls`, ... while a buffer is over the limits.
fn split_call(
    gpu: &Gpu,
    a: &Args,
    b: &OpBuffers,
    kernels: &FormKernels,
    shape: ScanShape,
) -> Result<Vec<SubCall>, GpuError> {
    let mut last = None;
    let first = a.min_sub_calls.min(shape.heads);
    for n in (first..=shape.heads).filter(|n| shape.heads % n == 0) {
        let heads = shape.heads / n;
        let sub = ScanShape {
            heads,
            qk_heads: heads,
            ..shape
        };
        let attempt = (0..n)
            .map(|i| {
                let own = if n == 1 {
                    None
                } else {
                    Some(sub_buffers(gpu, a, b, sub, i)?)
                };
                let (scan, bwd) = build_call(gpu, kernels, sub, own.as_ref().unwrap_or(b))?;
                Ok(SubCall {
                    scan,
                    bwd,
                    _buffers: own,
                })
            })
            .collect::<Result<Vec<_>, GpuError>>();
        match attempt {
            Err(e @ GpuError::TooLarge { .. }) => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| GpuError::Invalid("no operator heads".into())))
}

fn bench_op(
    gpu: &Gpu,
    a: &Args,
    b: &OpBuffers,
    kernels: &FormKernels,
    shape: ScanShape,
    timer: Option<&Timestamps>,
) -> Result<OpTimes, GpuError> {
    check_training_shape(&shape)?;
    let calls = split_call(gpu, a, b, kernels, shape)?;
    let fwd_all = |enc: &mut wgpu::CommandEncoder| calls.iter().for_each(|c| c.scan.encode(enc));
    let bwd_all = |enc: &mut wgpu::CommandEncoder| calls.iter().for_each(|c| c.bwd.encode(enc));
    let both = |enc: &mut wgpu::CommandEncoder| {
        if let Some(t) = timer {
            t.mark(enc, 0);
        }
        fwd_all(enc);
        if let Some(t) = timer {
            t.mark(enc, 1);
        }
        bwd_all(enc);
        if let Some(t) = timer {
            t.mark(enc, 2);
            t.resolve(enc);
        }
    };
    for _ in 0..a.warmup {
        wall_ms(gpu, both)?;
    }
    let (mut fwd, mut bw, mut all, mut g_f, mut g_b) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..a.iters {
        fwd.push(wall_ms(gpu, fwd_all)?);
        bw.push(wall_ms(gpu, bwd_all)?);
        all.push(wall_ms(gpu, both)?);
        if let Some(t) = timer {
            let ms = t.intervals_ms(gpu)?;
            g_f.push(ms[0]);
            g_b.push(ms[1]);
        }
    }
    Ok(OpTimes {
        strategy: calls[0].scan.strategy().name(),
        sub_calls: calls.len(),
        fwd: median(fwd),
        bwd: median(bw),
        both: median(all),
        gpu: timer.map(|_| (median(g_f), median(g_b))),
        fwd_flops: calls.iter().map(|c| c.scan.flops()).sum(),
        fwd_bytes: calls.iter().map(|c| c.scan.bytes()).sum(),
    })
}

pub fn run_op(gpu: &Gpu, a: &Args, adapter: &str, anchors: &Anchors) -> Vec<OpRow> {
    let timer = Timestamps::new(gpu, 3);
    println!(
        "## Operator forward + backward ({} tokens per call, heads {} × batch, dk {} dv {}, \
         levels = λ columns = {}; wall ms per call, median of {} after {} warm-up; GPU \
         stage times: {})",
        a.tokens,
        a.heads,
        a.dk,
        a.dv,
        a.levels,
        a.iters,
        a.warmup,
        if timer.is_some() {
            "timestamps"
        } else {
            "n/a (no TIMESTAMP_QUERY)"
        }
    );
    println!();
    println!(
        "| adapter | form | scan | T | batch | op heads | sub-calls | fwd ms | bwd ms | fwd+bwd ms | GPU fwd | \
         GPU bwd | fwd GFLOP/s | fwd GB/s | tokens/s | anchor fwd ms | × fwd | anchor fwd+bwd ms | × fwd+bwd |"
    );
    println!(
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | \
         ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut rows = Vec::new();
    let buffers = match scoped(gpu, || op_buffers(gpu, a)) {
        Ok(b) => b,
        Err(e) => {
            println!("| {adapter} | | | | | | | error: {e} | | | | | | | | | | | |");
            return rows;
        }
    };
    for form in a.forms() {
        let kernels = scoped(gpu, || {
            Ok(FormKernels {
                scan: ScanKernels::new(gpu, form)?,
                m2: match form {
                    Form::Mamba2 => Some(M2Kernels::new(gpu)?),
                    Form::Gdn => None,
                },
            })
        });
        for &t in &a.ts {
            let batch = a.tokens.checked_div(t).unwrap_or(0);
            let result = match &kernels {
                Err(e) => Err(e.clone()),
                Ok(_) if t == 0 || a.tokens % t != 0 => {
                    Err(format!("T = {t} does not divide {} tokens", a.tokens))
                }
                Ok(k) => scoped(gpu, || {
                    bench_op(gpu, a, &buffers, k, op_shape(a, form, t), timer.as_ref())
                }),
            };
            let row = OpRow {
                form,
                t,
                batch,
                result,
                best: anchors.best(form, t, a),
            };
            print_op_row(adapter, a, &row);
            rows.push(row);
        }
    }
    println!();
    rows
}

fn print_op_row(adapter: &str, a: &Args, r: &OpRow) {
    let name = r.form.name();
    let heads = a.heads * r.batch;
    match &r.result {
        Err(e) => println!(
            "| {adapter} | {name} | | {} | {} | {heads} | | error: {} | | | | | | | | | | | |",
            r.t,
            r.batch,
            e.replace('\n', " ").replace('|', "/")
        ),
        Ok(x) => {
            let (gf, gb) = match x.gpu {
                Some((f, b)) => (format!("{f:.3}"), format!("{b:.3}")),
                None => (String::new(), String::new()),
            };
            let fwd_s = x.fwd_ms() / 1e3;
            let ratio = |anchor: &Option<crate::anchors::Timing>, ours: f64| match anchor {
                Some(t) => (
                    format!("{:.2} ({})", t.ms, t.who),
                    format!("{:.2}", ours / t.ms),
                ),
                None => (String::new(), String::new()),
            };
            let (af, xf) = ratio(&r.best.fwd, x.fwd);
            let (ab, xb) = ratio(&r.best.fwd_bwd, x.both);
            println!(
                "| {adapter} | {name} | {} | {} | {} | {heads} | {} | {:.3} | {:.3} | {:.3} | {gf} | {gb} | \
                 {:.1} | {:.1} | {:.0} | {af} | {xf} | {ab} | {xb} |",
                x.strategy,
                r.t,
                r.batch,
                x.sub_calls,
                x.fwd,
                x.bwd,
                x.both,
                x.fwd_flops / fwd_s / 1e9,
                x.fwd_bytes / fwd_s / 1e9,
                a.tokens as f64 / (x.both / 1e3)
            );
        }
    }
}
