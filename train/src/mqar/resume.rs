//! The paused run of `loglinear mqar`: a checkpoint folder `<out>.run/` in `loglinear train`'s
//! format ([`crate::checkpoint_dir`]: parameters, AdamW moments and step count, written
//! crash-safely), whose `trainer_state.json` settings hold the sweep's settings and the run's
//! own state ([`RunState`]).

use super::{settings_json, MqarArch, MqarArgs, MqarError};
use crate::checkpoint_dir::{self, TrainerState};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The checkpoint folder of `out`'s paused run.
pub(super) fn run_dir(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".run");
    PathBuf::from(s)
}

/// An evaluation's (kv, correct, scored) per kv setting.
pub(super) type EvalCounts = Vec<(usize, u64, u64)>;

/// Where a run is: enough to continue it exactly as if it had not stopped.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunState {
    pub arch: MqarArch,
    pub dim: usize,
    pub lr: f64,
    pub seed: u64,
    /// Steps taken.
    pub step: u64,
    /// The step count, after any `--max-seconds-per-run` cut (not recomputed on resume).
    pub steps: u64,
    /// The step count before that cut (a shorter run is reported as `time-budget`).
    pub planned: u64,
    /// The shuffle generator's state before the current epoch's shuffle (the epoch's order is
    /// regenerated from it) and the position in that order.
    pub epoch_rng: u64,
    pub epoch_pos: usize,
    /// (step, mean accuracy) of every evaluation so far.
    pub evals: Vec<(u64, f64)>,
    /// The last evaluation: its step and (kv, correct, scored) per setting.
    pub last_eval: Option<(u64, EvalCounts)>,
    /// Training loss and accuracy of the last read-back.
    pub loss: f64,
    pub train_acc: f64,
    pub tokens: u64,
    /// Seconds the run has taken so far, over all invocations.
    pub seconds: f64,
}

/// An f64 as its bit pattern in a string: serde_json does not always read a number back to
/// the same f64, and a resumed run must report exactly what an uninterrupted one would.
fn bits(x: f64) -> Value {
    Value::String(x.to_bits().to_string())
}

fn from_bits(v: &Value) -> Option<f64> {
    v.as_str()?.parse::<u64>().ok().map(f64::from_bits)
}

impl RunState {
    /// The run as the sweep prints it.
    pub fn label(&self) -> String {
        super::run_label(self.arch, self.dim, self.lr, self.seed)
    }

    /// The checkpoint's trainer state: the run's state and the sweep's `settings`.
    pub fn to_trainer_state(&self, settings: Value, lr_now: f64) -> TrainerState {
        let run = json!({
            "arch": self.arch.name(),
            "dim": self.dim,
            "lr": self.lr,
            "seed": self.seed,
            "steps": self.steps,
            "planned_steps": self.planned,
            "epoch_pos": self.epoch_pos,
            "evals": self.evals.iter().map(|&(s, a)| json!([s, bits(a)])).collect::<Vec<_>>(),
            "last_eval": self.last_eval.as_ref().map(|(s, acc)| json!({"step": s, "counts": acc})),
            "loss": bits(self.loss),
            "train_accuracy": bits(self.train_acc),
            "seconds": self.seconds,
        });
        TrainerState {
            step: self.step,
            rng_state: self.epoch_rng,
            tokens_seen: self.tokens,
            lr: lr_now,
            // Finite whenever a run pauses (a non-finite loss ends it as diverged); the field
            // must be a JSON number.
            loss: if self.loss.is_finite() {
                self.loss
            } else {
                0.0
            },
            last_val_bpt: None,
            best_val_bpt: None,
            settings: json!({ "mqar": settings, "run": run }),
        }
    }

    /// The sweep's settings and the run's state from a checkpoint's trainer state.
    fn from_trainer_state(t: &TrainerState) -> Option<(Value, Self)> {
        let r = t.settings.get("run")?;
        let u = |k: &str| r.get(k).and_then(Value::as_u64);
        let evals = r
            .get("evals")?
            .as_array()?
            .iter()
            .map(|e| Some((e.get(0)?.as_u64()?, from_bits(e.get(1)?)?)))
            .collect::<Option<Vec<_>>>()?;
        let last_eval = match r.get("last_eval")? {
            Value::Null => None,
            e => {
                let counts = e
                    .get("counts")?
                    .as_array()?
                    .iter()
                    .map(|c| {
                        Some((
                            c.get(0)?.as_u64()? as usize,
                            c.get(1)?.as_u64()?,
                            c.get(2)?.as_u64()?,
                        ))
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some((e.get("step")?.as_u64()?, counts))
            }
        };
        let state = Self {
            arch: MqarArch::from_name(r.get("arch")?.as_str()?)?,
            dim: u("dim")? as usize,
            lr: r.get("lr")?.as_f64()?,
            seed: u("seed")?,
            step: t.step,
            steps: u("steps")?,
            planned: u("planned_steps")?,
            epoch_rng: t.rng_state,
            epoch_pos: u("epoch_pos")? as usize,
            evals,
            last_eval,
            loss: from_bits(r.get("loss")?)?,
            train_acc: from_bits(r.get("train_accuracy")?)?,
            tokens: t.tokens_seen,
            seconds: r.get("seconds")?.as_f64()?,
        };
        Some((t.settings.get("mqar")?.clone(), state))
    }
}

/// A paused run found beside the results file.
pub(super) struct Paused {
    /// The complete checkpoint folder (`<out>.run`, or `<out>.run.old` after a crash between
    /// the renames of a save).
    pub dir: PathBuf,
    pub state: RunState,
}

/// The paused run in `run_dir`, if any. A folder that is there but cannot be read, or holds
/// another sweep's run (other settings), is an error that names it: it is never discarded.
pub(super) fn find_paused(run_dir: &Path, args: &MqarArgs) -> Result<Option<Paused>, MqarError> {
    let Some(dir) = checkpoint_dir::find(run_dir) else {
        if run_dir.exists() {
            return Err(MqarError::NoRunState {
                dir: run_dir.to_path_buf(),
            });
        }
        return Ok(None);
    };
    let unreadable = |why: String| MqarError::UnreadableRunState {
        dir: dir.clone(),
        why,
    };
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| unreadable(e.to_string()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| unreadable(format!("{}: {e}", path.display())))?;
    let trainer = TrainerState::from_json(&path, &v).map_err(|e| unreadable(e.to_string()))?;
    let (settings, state) = RunState::from_trainer_state(&trainer).ok_or_else(|| {
        unreadable(format!(
            "{}: not an MQAR run's state (settings.mqar / settings.run)",
            path.display()
        ))
    })?;
    let want = settings_json(args);
    if settings != want {
        return Err(MqarError::PausedWithOtherSettings {
            dir,
            run: state.label(),
            found: settings.to_string(),
            want: want.to_string(),
        });
    }
    Ok(Some(Paused { dir, state }))
}

/// Removes `run_dir` and the folders a save leaves behind after a crash.
pub(super) fn remove(run_dir: &Path) -> Result<(), MqarError> {
    for suffix in ["", ".old", ".tmp"] {
        let mut s = run_dir.as_os_str().to_owned();
        s.push(suffix);
        let d = PathBuf::from(s);
        if d.exists() {
            std::fs::remove_dir_all(&d).map_err(|source| MqarError::Remove { path: d, source })?;
        }
    }
    Ok(())
}
