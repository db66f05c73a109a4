//! Shared by the CPU and GPU prefill tests: sessions, fixed token streams and random models.

use loglinear_converter::{Tensor, TensorStore};
use loglinear_runtime::{Model, ModelConfig, Session, SessionConfig};

/// `x` as f64, for the comparisons against an f64 reference.
pub fn wide(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// An arena for an f32 session of `model` with `levels` Fenwick levels.
pub fn arena(model: &Model<'_>, levels: usize) -> Vec<u8> {
    let cfg = SessionConfig {
        levels: Some(levels),
        ..Default::default()
    };
    vec![0u8; Session::<f32>::arena_bytes(model, &cfg).unwrap()]
}

/// An f32 session of `model` with `levels` Fenwick levels in `arena` (from [`arena`]).
pub fn session<'m>(model: &Model<'m>, arena: &'m mut [u8], levels: usize) -> Session<'m, f32> {
    Session::new(
        model,
        arena,
        SessionConfig {
            levels: Some(levels),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Steps `ids` on `s`, returning the logits of every step `[n][V]`.
pub fn step_all(s: &mut Session<'_, f32>, ids: &[u32]) -> Vec<f32> {
    let mut out = Vec::new();
    for &id in ids {
        out.extend_from_slice(s.step(id).unwrap());
    }
    out
}

/// The next 24-bit value of the tests' LCG (Numerical Recipes' constants) at `state`.
fn lcg_next(state: &mut u32) -> u32 {
    *state = state.wrapping_mul(1664525).wrapping_add(1013904223);
    *state >> 8
}

/// A fixed pseudo-random token stream (LCG) below `vocab`.
pub fn lcg_ids(n: usize, vocab: usize, seed: u32) -> Vec<u32> {
    let mut x = seed;
    (0..n).map(|_| lcg_next(&mut x) % vocab as u32).collect()
}

/// A fixed pseudo-random stream of byte tokens (the top byte of each LCG state).
pub fn lcg_bytes(n: usize, seed: u32) -> Vec<u32> {
    let mut x = seed;
    (0..n).map(|_| lcg_next(&mut x) >> 16).collect()
}

/// The tensors of a random model of `config` (LCG at `seed`): unit-variance projections, dt bias
/// −3, norms, D and λ scales 1. `A_log` is `a_log` where given, otherwise drawn from
/// [-1.5, -0.5) (decays around e^-0.05 per token).
pub fn random_store(config: &ModelConfig, seed: u32, a_log: Option<f32>) -> TensorStore {
    use loglinear_runtime::Role::*;
    let mut state = seed;
    let mut uniform = move || lcg_next(&mut state) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
    let mut store = TensorStore::default();
    for name in config.tensor_names() {
        let (rows, cols) = config.tensor_shape(name.role);
        let n = rows * cols;
        let data: Vec<f32> = match name.role {
            FinalNorm | MixerNorm | MlpNorm | OutNorm | DSkip | LambdaScale => vec![1.0; n],
            ALog => match a_log {
                Some(a) => vec![a; n],
                None => (0..n).map(|_| -1.0 + 0.5 * uniform()).collect(),
            },
            DtBias => vec![-3.0; n],
            ConvBias => vec![0.0; n],
            Conv | QConv | KConv | VConv => (0..n).map(|_| 0.5 * uniform()).collect(),
            Embedding => (0..n).map(|_| 1.7 * uniform()).collect(),
            _ => {
                let a = (3.0 / cols as f32).sqrt();
                (0..n).map(|_| a * uniform()).collect()
            }
        };
        store.insert(name, Tensor { rows, cols, data });
    }
    store
}
