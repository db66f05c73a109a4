//! What storing the recurrent state in f16 costs: each trained model is run twice over the
//! same text, once with an f32 state (`Session<f32>`) and once with an f16 state
//! (`Session<half::f16>`; arithmetic stays f32, only what is kept between steps is narrowed),
//! and the logits are compared step by step.
//!
//! Figures (relative L2 error of the logits, max and mean over steps, and agreement of the
//! greedy argmax) are printed; run with
//! `cargo test --release -p loglinear-tests --test f16_state -- --nocapture`
//! (about 15 s in release; a debug build gives the same figures but takes about 3 minutes).

use loglinear_runtime::sampler::argmax;
use std::path::{Path, PathBuf};

use half::f16;
use loglinear_converter::Checkpoint;
use loglinear_runtime::{Model, Session, SessionConfig, StateElem};

/// Bytes of text fed to both sessions.
const TEXT_LEN: usize = 1000;

/// Bounds, a little above what was measured (first 1000 bytes of
/// models/ll-gdn-mcu/TRAINING.md, default 15 levels / 1 level; x86_64, identical in release and
/// debug builds):
///
/// | model | max rel-L2 (at t) | mean rel-L2 | greedy argmax agreement |
/// | --- | ---: | ---: | ---: |
/// | ll-gdn-mcu | 2.589e-3 (t = 76) | 1.945e-4 | 99.9% (999/1000) |
/// | ll-mamba2-mcu | 5.776e-4 (t = 474) | 5.352e-5 | 100% |
/// | gdn-mcu | 5.428e-3 (t = 947) | 3.214e-4 | 99.9% (999/1000) |
struct Bound {
    model: &'static str,
    max_rel_l2: f64,
    mean_rel_l2: f64,
    min_agreement: f64,
}

const BOUNDS: &[Bound] = &[
    Bound {
        model: "ll-gdn-mcu",
        max_rel_l2: 5e-3,
        mean_rel_l2: 4e-4,
        min_agreement: 0.98,
    },
    Bound {
        model: "ll-mamba2-mcu",
        max_rel_l2: 1.5e-3,
        mean_rel_l2: 1.5e-4,
        min_agreement: 0.98,
    },
    Bound {
        model: "gdn-mcu",
        max_rel_l2: 1e-2,
        mean_rel_l2: 7e-4,
        min_agreement: 0.98,
    },
];

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models")
}

fn text() -> Vec<u8> {
    let path = models_dir().join("ll-gdn-mcu/TRAINING.md");
    let mut t = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(t.len() >= TEXT_LEN, "{} is too short", path.display());
    t.truncate(TEXT_LEN);
    t
}

/// The logits after every token of `text` with the state stored as `E`, and the state bytes.
fn run<E: StateElem>(model: &Model<'_>, text: &[u8]) -> (Vec<Vec<f32>>, usize) {
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg).unwrap()];
    let mut s = Session::<E>::new(model, &mut arena, cfg).unwrap();
    let logits = text
        .iter()
        .map(|&b| s.step(u32::from(b)).unwrap().to_vec())
        .collect();
    (logits, s.allocated_state_bytes())
}

struct Figures {
    max_rel_l2: f64,
    max_at: usize,
    mean_rel_l2: f64,
    agreement: f64,
    state_bytes_f32: usize,
    state_bytes_f16: usize,
}

fn measure(name: &str, text: &[u8]) -> Figures {
    let ckpt = Checkpoint::load(models_dir().join(name)).unwrap();
    let model = ckpt.model().unwrap();
    let (a, state_bytes_f32) = run::<f32>(&model, text);
    let (b, state_bytes_f16) = run::<f16>(&model, text);
    let (mut max, mut max_at, mut sum, mut agree) = (0.0f64, 0, 0.0f64, 0usize);
    for (t, (la, lb)) in a.iter().zip(&b).enumerate() {
        let diff: f64 = la
            .iter()
            .zip(lb)
            .map(|(x, y)| ((x - y) as f64).powi(2))
            .sum();
        let norm: f64 = la.iter().map(|x| (*x as f64).powi(2)).sum();
        let rel = (diff / norm).sqrt();
        if rel > max {
            max = rel;
            max_at = t;
        }
        sum += rel;
        agree += usize::from(argmax(la) == argmax(lb));
    }
    Figures {
        max_rel_l2: max,
        max_at,
        mean_rel_l2: sum / a.len() as f64,
        agreement: agree as f64 / a.len() as f64,
        state_bytes_f32,
        state_bytes_f16,
    }
}

#[test]
fn f16_state_stays_close_to_f32() {
    let text = text();
    println!(
        "\nf16 vs f32 state storage, {} tokens (first {} bytes of models/ll-gdn-mcu/TRAINING.md)\n",
        text.len(),
        text.len()
    );
    println!(
        "| model | max rel-L2 (logits) | at t | mean rel-L2 | greedy argmax agreement | state bytes f32 → f16 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut failures = Vec::new();
    for b in BOUNDS {
        let f = measure(b.model, &text);
        println!(
            "| {} | {:.3e} | {} | {:.3e} | {:.2}% | {} → {} |",
            b.model,
            f.max_rel_l2,
            f.max_at,
            f.mean_rel_l2,
            100.0 * f.agreement,
            f.state_bytes_f32,
            f.state_bytes_f16
        );
        if f.max_rel_l2 > b.max_rel_l2
            || f.mean_rel_l2 > b.mean_rel_l2
            || f.agreement < b.min_agreement
        {
            failures.push(format!(
                "{}: max rel-L2 {:.3e} (bound {:.1e}), mean {:.3e} (bound {:.1e}), \
                 agreement {:.4} (bound {})",
                b.model,
                f.max_rel_l2,
                b.max_rel_l2,
                f.mean_rel_l2,
                b.mean_rel_l2,
                f.agreement,
                b.min_agreement
            ));
        }
    }
    println!();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
