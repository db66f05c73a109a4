//! Loss at each position of the evaluation windows, like the per-position validation loss of
//! the models' `TRAINING.md` (`per_position_loss.csv`) and the paper's per-position figure.
//!
//! Same windows as [`eval`](crate::eval): non-overlapping windows of `ctx + 1` bytes, each from
//! an empty state; position `p` is the prediction of the window's byte `p + 1` after seeing
//! `p + 1` bytes. The mean over positions is exactly the bits per byte of those windows.

use crate::eval::{bits_of, window_count, Bpb, EvalError};
use loglinear_cpu_prefill::PrefillOptions;
use loglinear_runtime::session::{Session, SessionConfig};
use loglinear_runtime::Model;
use loglinear_runtime::StateElem;
use std::fmt::Write as _;

/// The decoder state of [`WindowRunner::Step`]: how a board would hold it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepState {
    /// State levels (`None`: the model's, 15 log-linear, 1 plain). Fewer levels saturate the
    /// top level at 2^(levels − 1) tokens, as on a board with little RAM.
    pub levels: Option<usize>,
    /// The state in f16 instead of f32.
    pub f16: bool,
}

/// How each window is run through the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowRunner {
    /// Token by token through the decoder (what a board computes; honours Q8 activations, and
    /// the state's levels and element type).
    Step(StepState),
    /// The chunkwise algorithm of spec §7 on CPU threads (`loglinear-cpu-prefill`), logits at
    /// every position: much faster; f32 activations only; same logits up to f32 rounding.
    Chunkwise {
        /// Worker threads (`None`: every core).
        threads: Option<usize>,
    },
}

impl WindowRunner {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WindowRunner::Step(_) => "step",
            WindowRunner::Chunkwise { .. } => "chunkwise",
        }
    }
}

/// Summed loss at every position of the windows.
#[derive(Clone, Debug, PartialEq)]
pub struct PerPosition {
    /// Bits (−log2 p) summed over the windows, per position `0..ctx`.
    pub bits: Vec<f64>,
    /// Windows summed.
    pub windows: usize,
}

impl PerPosition {
    /// Predictions per window.
    pub fn ctx(&self) -> usize {
        self.bits.len()
    }

    /// Mean bits at each position.
    pub fn mean_bits(&self) -> Vec<f64> {
        let w = self.windows.max(1) as f64;
        self.bits.iter().map(|&b| b / w).collect()
    }

    /// The whole evaluation: total bits, predictions, windows (bits per byte = the mean over
    /// positions of [`mean_bits`](Self::mean_bits)).
    pub fn total(&self) -> Bpb {
        Bpb {
            bits: self.bits.iter().sum(),
            predictions: self.windows * self.ctx(),
            windows: self.windows,
        }
    }

    /// The CSV of `per_position_loss.csv`: header `position,val_loss_nats,val_loss_bits`, then
    /// one row per position with the mean loss over the windows (9 decimals, so that the mean
    /// of the rows is the bits per byte to about 1e-10).
    pub fn to_csv(&self) -> String {
        let mut s = String::from("position,val_loss_nats,val_loss_bits\n");
        for (p, b) in self.mean_bits().into_iter().enumerate() {
            let nats = b * std::f64::consts::LN_2;
            // Writing to a String cannot fail.
            let _ = writeln!(s, "{p},{nats:.9},{b:.9}");
        }
        s
    }

    /// Mean bits over power-of-two buckets of positions, as in `TRAINING.md`'s table:
    /// `{0}, {1}, {2,3}, {4..7}, …`, the last one cut at `ctx − 1`. Each item is
    /// (first position, last position, mean bits).
    pub fn buckets(&self) -> Vec<(usize, usize, f64)> {
        power_of_two_buckets(&self.mean_bits())
    }
}

/// Mean of `values` over the position buckets `{0}, {1}, {2,3}, {4..7}, …` (see
/// [`PerPosition::buckets`]).
pub fn power_of_two_buckets(values: &[f64]) -> Vec<(usize, usize, f64)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < values.len() {
        let last = if first == 0 {
            0
        } else {
            (2 * first - 1).min(values.len() - 1)
        };
        let slice = &values[first..=last];
        out.push((first, last, slice.iter().sum::<f64>() / slice.len() as f64));
        first = last + 1;
    }
    out
}

/// Loss at each position of `model` on `text`'s windows of `ctx` predictions (bytes of a
/// byte-level model, or token ids), run as `runner` says; `progress(window)` is called after
/// each window.
pub fn per_position_loss<T: Copy + Into<u32>>(
    model: &Model<'_>,
    text: &[T],
    ctx: usize,
    runner: WindowRunner,
    progress: &mut dyn FnMut(usize),
) -> Result<PerPosition, EvalError> {
    let windows = crate::eval::check(text, ctx)?;
    let mut bits = vec![0.0f64; ctx];
    match runner {
        WindowRunner::Step(state) if state.f16 => {
            step_windows::<half::f16, T>(model, text, ctx, state, &mut bits, progress)?
        }
        WindowRunner::Step(state) => {
            step_windows::<f32, T>(model, text, ctx, state, &mut bits, progress)?
        }
        WindowRunner::Chunkwise { threads } => {
            let opts = PrefillOptions {
                all_logits: true,
                threads,
                ..PrefillOptions::default()
            };
            let vocab = model.config().vocab_size;
            for w in 0..windows {
                let win = &text[w * ctx..w * ctx + ctx + 1];
                let tokens: Vec<u32> = win[..ctx].iter().map(|&t| t.into()).collect();
                let p = loglinear_cpu_prefill::prefill(model, &tokens, &opts)?;
                // Asked for above, so always there.
                let all = p.all_logits.unwrap_or_default();
                for ((sum, logits), &next) in
                    bits.iter_mut().zip(all.chunks_exact(vocab)).zip(&win[1..])
                {
                    *sum += bits_of(logits, next.into() as usize);
                }
                progress(w + 1);
            }
        }
    }
    Ok(PerPosition { bits, windows })
}

/// [`WindowRunner::Step`]: adds each window's bits at every position to `bits`.
fn step_windows<E: StateElem, T: Copy + Into<u32>>(
    model: &Model<'_>,
    text: &[T],
    ctx: usize,
    state: StepState,
    bits: &mut [f64],
    progress: &mut dyn FnMut(usize),
) -> Result<(), EvalError> {
    let cfg = SessionConfig {
        levels: state.levels,
        ..SessionConfig::default()
    };
    let mut arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg)?];
    let mut session = Session::<E>::new(model, &mut arena, cfg)?;
    for w in 0..window_count(text.len(), ctx) {
        session.reset();
        let win = &text[w * ctx..w * ctx + ctx + 1];
        for (sum, pair) in bits.iter_mut().zip(win.windows(2)) {
            let logits = session.step(pair[0].into())?;
            *sum += bits_of(logits, pair[1].into() as usize);
        }
        progress(w + 1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let v: Vec<f64> = (0..10).map(|p| p as f64).collect();
        let b = power_of_two_buckets(&v);
        let spans: Vec<(usize, usize)> = b.iter().map(|&(a, z, _)| (a, z)).collect();
        assert_eq!(spans, [(0, 0), (1, 1), (2, 3), (4, 7), (8, 9)]);
        assert_eq!(b[3].2, 5.5);
        assert_eq!(b[4].2, 8.5);
        assert_eq!(power_of_two_buckets(&[]), []);
    }

    #[test]
    fn csv_has_the_reference_columns() {
        let p = PerPosition {
            bits: vec![2.0, 4.0],
            windows: 2,
        };
        let csv = p.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "position,val_loss_nats,val_loss_bits");
        assert_eq!(lines[1], "0,0.693147181,1.000000000");
        assert_eq!(lines.len(), 3);
        assert_eq!(p.total().bpb(), 1.5);
    }
}
