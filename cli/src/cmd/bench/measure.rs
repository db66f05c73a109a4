//! The timed runs: decode reps from a saved state, the standard tests, the context curve,
//! reaching a context, and the GPU behind `--gpu`.

use super::*;

/// `n` as llama-bench writes parameter counts: 1.4M, 356K, 7B.
pub(super) fn short_count(n: usize) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0}K", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// `t` as a test suffix: 16K for 16384, else the number.
pub(super) fn context_name(t: usize) -> String {
    if t >= 1024 && t % 1024 == 0 {
        format!("{}K", t / 1024)
    } else {
        t.to_string()
    }
}

/// `n` deterministic pseudo-random tokens below `vocab` (a 32-bit LCG's high bits): the same
/// for every run, backend and kernel path.
pub(super) fn bench_tokens(n: usize, vocab: usize, seed: u32) -> Vec<u32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (((s >> 8) as u64 * vocab as u64) >> 24) as u32
        })
        .collect()
}

/// A decoder state saved after a context, restored before every timed decode.
pub(super) struct SavedState<E> {
    t: u64,
    states: Vec<E>,
    conv: Vec<f32>,
    /// How the context was reached, for the notes.
    how: String,
}

/// A session of `ctx.model` with `act`, in its own arena.
pub(super) struct OwnedSession<E> {
    arena: Vec<u8>,
    cfg: SessionConfig,
    _elem: std::marker::PhantomData<E>,
}

impl<E: StateElem> OwnedSession<E> {
    fn new(model: &Model<'_>, act: Activations) -> Result<Self, BenchError> {
        let cfg = SessionConfig {
            levels: None,
            activations: Some(act),
        };
        Ok(Self {
            arena: vec![0u8; Session::<E>::arena_bytes(model, &cfg)?],
            cfg,
            _elem: std::marker::PhantomData,
        })
    }

    fn session<'s>(&'s mut self, model: &Model<'s>) -> Result<Session<'s, E>, BenchError> {
        Ok(Session::<E>::new(model, &mut self.arena, self.cfg)?)
    }
}

/// Feeds `tokens`; returns the seconds it took.
pub(super) fn time_steps<E: StateElem>(
    session: &mut Session<'_, E>,
    tokens: &[u32],
) -> Result<f64, BenchError> {
    let start = Instant::now();
    for &token in tokens {
        session.step(token)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Runs `one` once untimed, then `reps` times, with a progress bar named `what` on stderr;
/// returns tokens/s of each timed run.
pub(super) fn timed_reps(
    what: &str,
    reps: u32,
    tokens: usize,
    mut one: impl FnMut() -> Result<f64, BenchError>,
) -> Result<Vec<f64>, BenchError> {
    let pb = crate::progress_bar(reps as usize + 1, what);
    pb.set_message("warm-up");
    one()?;
    let samples = (0..reps)
        .map(|i| {
            pb.set_position(u64::from(i) + 1);
            pb.set_message("timed");
            one().map(|secs| tokens as f64 / secs.max(1e-12))
        })
        .collect();
    pb.finish_and_clear();
    samples
}

pub(super) fn bench_model<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    report: &mut Report,
) -> Result<(), BenchError> {
    let gpu_model = match ctx.device {
        Some(d) => Some(d.model(ctx.model)?),
        None => None,
    };
    let gpu_model = gpu_model.as_ref();
    match &ctx.args.curve {
        Some(contexts) => curve::<E>(ctx, gpu_model, contexts, report),
        None => standard_tests::<E>(ctx, gpu_model, report),
    }
}

/// pp and tg rows for one model.
pub(super) fn standard_tests<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    report: &mut Report,
) -> Result<(), BenchError> {
    let args = ctx.args;
    let model = ctx.model;
    let vocab = model.config().vocab_size;
    let prompt = bench_tokens(args.n_prompt, vocab, 1);
    let gen = bench_tokens(args.n_gen, vocab, 2);
    let row = |backend: &str, kernel: String, act: Activations, test: String, samples| BenchRow {
        model: ctx.model_index,
        backend: backend.into(),
        kernel,
        act: act.name(),
        state: E::NAME,
        test,
        samples,
    };
    // Contexts for the tg tests, reached once and restored for every config and rep.
    let mut saved: Vec<(usize, SavedState<E>)> = Vec::new();
    if args.n_gen > 0 {
        for &depth in &args.depth {
            if !saved.iter().any(|(d, _)| *d == depth) {
                saved.push((depth, reach_context::<E>(ctx, gpu_model, depth)?));
            }
        }
    }
    for config in ctx.configs {
        quant::set_forced_path(config.kernel);
        let mut owned = OwnedSession::<E>::new(model, config.act)?;
        let mut session = owned.session(model)?;
        if args.n_prompt > 0 && args.measures(PrefillArg::Step) {
            let what = format!("pp{} CPU {}", args.n_prompt, config.kernel_name());
            let samples = timed_reps(&what, args.reps, prompt.len(), || {
                session.reset();
                time_steps(&mut session, &prompt)
            })?;
            report.add_bench(row(
                "CPU",
                config.kernel_name(),
                config.act,
                format!("pp{}", args.n_prompt),
                samples,
            ))?;
        }
        for &depth in &args.depth {
            let Some((_, state)) = saved.iter().find(|(d, _)| *d == depth) else {
                continue;
            };
            let test = match depth {
                0 => format!("tg{}", args.n_gen),
                d => format!("tg{}@{}", args.n_gen, context_name(d)),
            };
            let what = format!("{test} CPU {}", config.kernel_name());
            let samples = timed_reps(&what, args.reps, gen.len(), || {
                session.load_state(state.t, &state.states, &state.conv)?;
                time_steps(&mut session, &gen)
            })?;
            report.add_bench(row("CPU", config.kernel_name(), config.act, test, samples))?;
        }
    }
    quant::set_forced_path(None);
    if args.n_prompt > 0 {
        // The prefills compute in f32 and ignore the activation mode and kernel path.
        let mut owned = OwnedSession::<E>::new(model, Activations::F32)?;
        let mut session = owned.session(model)?;
        if args.measures(PrefillArg::Chunkwise) {
            let opts = prefill_options(args);
            let what = format!("pp{} CPU chunkwise", args.n_prompt);
            let samples = timed_reps(&what, args.reps, prompt.len(), || {
                let start = Instant::now();
                loglinear_cpu_prefill::prefill_into(model, &prompt, &mut session, &opts)?;
                Ok(start.elapsed().as_secs_f64())
            })?;
            report.add_bench(row(
                "CPU chunkwise",
                "-".into(),
                Activations::F32,
                format!("pp{}", args.n_prompt),
                samples,
            ))?;
        }
        if let (Some(g), true) = (gpu_model, args.measures(PrefillArg::Gpu)) {
            let what = format!("pp{} GPU", args.n_prompt);
            let samples = timed_reps(&what, args.reps, prompt.len(), || {
                let start = Instant::now();
                g.prefill_into(&prompt, &mut session)?;
                Ok(start.elapsed().as_secs_f64())
            })?;
            report.add_bench(row(
                "GPU",
                "-".into(),
                Activations::F32,
                format!("pp{}", args.n_prompt),
                samples,
            ))?;
        }
    }
    for (depth, state) in &saved {
        if *depth > 0 {
            report.notes.push(format!(
                "{}: context {depth} reached by {}",
                report.models[ctx.model_index].label, state.how
            ));
        }
    }
    Ok(())
}

/// Decode speed after each context for one model.
pub(super) fn curve<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    contexts: &[usize],
    report: &mut Report,
) -> Result<(), BenchError> {
    let model = ctx.model;
    let tokens = ctx.args.curve_tokens as usize;
    let gen = bench_tokens(tokens, model.config().vocab_size, 2);
    for &context in contexts {
        let state = reach_context::<E>(ctx, gpu_model, context)?;
        for config in ctx.configs {
            quant::set_forced_path(config.kernel);
            let mut owned = OwnedSession::<E>::new(model, config.act)?;
            let mut session = owned.session(model)?;
            session.load_state(state.t, &state.states, &state.conv)?;
            let (live_levels, live_state_bytes) =
                (session.live_levels(), session.live_state_bytes());
            let what = format!("context {context} {}", config.kernel_name());
            let samples = timed_reps(&what, ctx.args.reps, tokens, || {
                session.load_state(state.t, &state.states, &state.conv)?;
                time_steps(&mut session, &gen)
            })?;
            report.add_curve(CurveRow {
                model: ctx.model_index,
                kernel: config.kernel_name(),
                act: config.act.name(),
                state: E::NAME,
                context,
                live_levels,
                live_state_bytes,
                tokens,
                samples,
            })?;
        }
        quant::set_forced_path(None);
        if context > 0 {
            report.notes.push(format!(
                "{}: context {context} reached by {}",
                report.models[ctx.model_index].label, state.how
            ));
        }
    }
    Ok(())
}

/// The decoder state after `depth` pseudo-random tokens, by the fastest prefill `--reach`
/// allows.
pub(super) fn reach_context<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    depth: usize,
) -> Result<SavedState<E>, BenchError> {
    let model = ctx.model;
    let mut owned = OwnedSession::<E>::new(model, Activations::F32)?;
    let mut session = owned.session(model)?;
    let tokens = bench_tokens(depth, model.config().vocab_size, 3);
    let start = Instant::now();
    let how = match (ctx.args.reach, gpu_model) {
        _ if depth == 0 => "nothing (fresh state)",
        (Reach::Step, _) => {
            let pb = crate::progress_bar(depth, "reaching the context by stepping");
            for (i, &token) in tokens.iter().enumerate() {
                session.step(token)?;
                if i % 256 == 0 {
                    pb.set_position(i as u64);
                }
            }
            pb.finish_and_clear();
            "stepping"
        }
        (Reach::Auto | Reach::Gpu, Some(g)) => {
            eprintln!("reaching context {depth} with the GPU prefill…");
            g.prefill_into(&tokens, &mut session)?;
            "the GPU prefill"
        }
        (Reach::Gpu, None) => return Err(BenchError::ReachGpuWithoutGpu),
        (Reach::Auto | Reach::Chunkwise, _) => {
            eprintln!("reaching context {depth} with the chunkwise CPU prefill…");
            let opts = prefill_options(ctx.args);
            loglinear_cpu_prefill::prefill_into(model, &tokens, &mut session, &opts)?;
            "the chunkwise CPU prefill"
        }
    };
    let how = if depth == 0 {
        how.to_string()
    } else {
        format!("{how} in {:.1} s", start.elapsed().as_secs_f64())
    };
    Ok(SavedState {
        t: session.t(),
        states: session.states().to_vec(),
        conv: session.conv_states().to_vec(),
        how,
    })
}

/// The GPU behind `--gpu`: wgpu through `loglinear-host-gpu`, its errors as this command's.
pub(super) mod gpu_backend {
    use super::BenchError;
    use loglinear_host_gpu::{Gpu, GpuModel};
    use loglinear_runtime::{Model, Session, StateElem};

    /// An open GPU.
    pub struct Device {
        gpu: Gpu,
    }

    /// A model's weights on the GPU.
    pub struct DeviceModel<'g> {
        model: GpuModel<'g>,
    }

    impl Device {
        pub fn open() -> Result<Self, BenchError> {
            Gpu::new()
                .map(|gpu| Self { gpu })
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }

        pub fn describe(&self) -> String {
            self.gpu.describe()
        }

        pub fn model(&self, model: &Model<'_>) -> Result<DeviceModel<'_>, BenchError> {
            GpuModel::new(&self.gpu, model)
                .map(|model| DeviceModel { model })
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }
    }

    impl DeviceModel<'_> {
        /// Prefills `tokens` into `session` (state handed over to the CPU decoder).
        pub fn prefill_into<E: StateElem>(
            &self,
            tokens: &[u32],
            session: &mut Session<'_, E>,
        ) -> Result<(), BenchError> {
            self.model
                .prefill_into(tokens, session)
                .map(|_| ())
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }
    }
}
