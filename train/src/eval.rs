//! Measuring a model on text: bits per byte, and how far a (quantized) model's logits are from
//! a reference's.
//!
//! Protocol (the one in the models' `TRAINING.md`): byte-level, non-overlapping windows of
//! `ctx + 1` bytes, window `k` covering bytes `[k·ctx, k·ctx + ctx]`; every window starts from
//! an empty state, feeds its first `ctx` bytes and predicts the `ctx` bytes that follow each.
//! Only whole windows count, so `(len − 1) / ctx` windows and `ctx` predictions each.

use loglinear_runtime::sampler::argmax;
use loglinear_runtime::session::{Session, SessionConfig, SessionError, StepError};
use loglinear_runtime::Model;

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The text is shorter than one window.
    #[error("{}", too_short(*len, *ctx))]
    TooShort {
        /// Tokens of text (bytes, for a byte-level model).
        len: usize,
        /// The context.
        ctx: usize,
    },
    /// `ctx` is zero.
    #[error("the context must be at least 1 token")]
    ZeroContext,
    /// The session could not be made.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A step failed (e.g. a byte outside a vocabulary smaller than 256).
    #[error(transparent)]
    Step(#[from] StepError),
    /// The chunkwise CPU prefill refused a window.
    #[error("chunkwise prefill: {0}")]
    Prefill(#[from] loglinear_cpu_prefill::PrefillError),
    /// The two models do not have the same vocabulary.
    #[error("vocabulary sizes differ: {0} vs {1}")]
    VocabMismatch(usize, usize),
}

/// Bits per byte of one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bpb {
    /// Total bits (−log2 p of every predicted byte).
    pub bits: f64,
    /// Bytes predicted.
    pub predictions: usize,
    /// Windows.
    pub windows: usize,
}

impl Bpb {
    /// Bits per byte.
    pub fn bpb(&self) -> f64 {
        self.bits / self.predictions.max(1) as f64
    }
}

/// A candidate model against a reference on the same bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The reference.
    pub reference: Bpb,
    /// The candidate.
    pub candidate: Bpb,
    /// ‖candidate − reference‖ / ‖reference‖ over all logits of all predictions.
    pub rel_logit_error: f64,
    /// Largest |candidate − reference| logit.
    pub max_abs_logit_error: f64,
    /// Fraction of predictions where both models pick the same top byte.
    pub top1_agreement: f64,
}

/// Number of whole windows of `ctx` predictions in `len` bytes.
pub fn window_count(len: usize, ctx: usize) -> usize {
    len.saturating_sub(1).checked_div(ctx).unwrap_or(0)
}

/// [`EvalError::TooShort`]'s message: the largest context that fits, where one does.
fn too_short(len: usize, ctx: usize) -> String {
    match len {
        0 | 1 => {
            format!("the text is {len} tokens long: one prediction needs 2 (a token and the next)")
        }
        _ => format!(
            "the text is {len} tokens long, shorter than one window of a {ctx}-token context \
             plus 1: give a context of {} or less",
            len - 1
        ),
    }
}

/// `−log2 softmax(logits)[target]`.
pub fn bits_of(logits: &[f32], target: usize) -> f64 {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let s: f64 = logits.iter().map(|&l| (l as f64 - m).exp()).sum();
    (m + s.ln() - logits[target] as f64) / std::f64::consts::LN_2
}

/// The number of windows of `ctx` predictions in `text`, or why there is none.
pub fn check<T>(text: &[T], ctx: usize) -> Result<usize, EvalError> {
    if ctx == 0 {
        return Err(EvalError::ZeroContext);
    }
    match window_count(text.len(), ctx) {
        0 => Err(EvalError::TooShort {
            len: text.len(),
            ctx,
        }),
        n => Ok(n),
    }
}

/// Bits per token of `model` on `text` with windows of `ctx` predictions (f32 state): bits
/// per byte when `text` is bytes, the byte-level models' tokens; `text` may also be token ids.
/// `progress(window)` is called after each window.
pub fn bits_per_byte<T: Copy + Into<u32>>(
    model: &Model<'_>,
    text: &[T],
    ctx: usize,
    progress: &mut dyn FnMut(usize),
) -> Result<Bpb, EvalError> {
    let windows = check(text, ctx)?;
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(model, &cfg)?];
    let mut session = Session::<f32>::new(model, &mut arena, cfg)?;
    let mut bits = 0.0;
    for w in 0..windows {
        session.reset();
        let win = &text[w * ctx..w * ctx + ctx + 1];
        for pair in win.windows(2) {
            let logits = session.step(pair[0].into())?;
            bits += bits_of(logits, pair[1].into() as usize);
        }
        progress(w + 1);
    }
    Ok(Bpb {
        bits,
        predictions: windows * ctx,
        windows,
    })
}

/// Runs `reference` and `candidate` side by side on the same windows (of bytes or token ids,
/// as [`bits_per_byte`]).
pub fn compare<T: Copy + Into<u32>>(
    reference: &Model<'_>,
    candidate: &Model<'_>,
    text: &[T],
    ctx: usize,
    progress: &mut dyn FnMut(usize),
) -> Result<Comparison, EvalError> {
    let windows = check(text, ctx)?;
    let (vr, vc) = (reference.config().vocab_size, candidate.config().vocab_size);
    if vr != vc {
        return Err(EvalError::VocabMismatch(vr, vc));
    }
    let cfg = SessionConfig::default();
    let mut arena_r = vec![0u8; Session::<f32>::arena_bytes(reference, &cfg)?];
    let mut arena_c = vec![0u8; Session::<f32>::arena_bytes(candidate, &cfg)?];
    let mut sr = Session::<f32>::new(reference, &mut arena_r, cfg)?;
    let mut sc = Session::<f32>::new(candidate, &mut arena_c, cfg)?;
    let (mut bits_r, mut bits_c) = (0.0, 0.0);
    let (mut diff2, mut ref2, mut max_abs) = (0.0f64, 0.0f64, 0.0f64);
    let mut agree = 0usize;
    for w in 0..windows {
        sr.reset();
        sc.reset();
        let win = &text[w * ctx..w * ctx + ctx + 1];
        for pair in win.windows(2) {
            let (token, next) = (pair[0].into(), pair[1].into() as usize);
            let lr = sr.step(token)?;
            let lc = sc.step(token)?;
            bits_r += bits_of(lr, next);
            bits_c += bits_of(lc, next);
            for (&a, &b) in lr.iter().zip(lc) {
                let d = (b - a) as f64;
                diff2 += d * d;
                ref2 += (a as f64) * (a as f64);
                max_abs = max_abs.max(d.abs());
            }
            agree += usize::from(argmax(lr) == argmax(lc));
        }
        progress(w + 1);
    }
    let n = windows * ctx;
    let bpb = |bits| Bpb {
        bits,
        predictions: n,
        windows,
    };
    Ok(Comparison {
        reference: bpb(bits_r),
        candidate: bpb(bits_c),
        rel_logit_error: if ref2 > 0.0 {
            (diff2 / ref2).sqrt()
        } else {
            diff2.sqrt()
        },
        max_abs_logit_error: max_abs,
        top1_agreement: agree as f64 / n as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_the_training_protocol() {
        // TRAINING.md: 272,381 validation bytes give 531 windows of 512.
        assert_eq!(window_count(272_381, 512), 531);
        assert_eq!(window_count(513, 512), 1);
        assert_eq!(window_count(512, 512), 0);
        assert_eq!(window_count(0, 512), 0);
    }

    #[test]
    fn uniform_logits_cost_eight_bits() {
        let l = [0.0f32; 256];
        assert!((bits_of(&l, 17) - 8.0).abs() < 1e-12);
        let mut l = [0.0f32; 4];
        l[2] = 1000.0;
        assert!(bits_of(&l, 2).abs() < 1e-12);
    }
}
