//! Anchors: other implementations' timings of the operator at the benchmark's shape, read from
//! JSON lines, so that no other system's figure lives in this source.
//!
//! A line is one object as `../shared/bench/fla_anchor.py` prints it:
//! `{"impl": "fla", "form": "m2", "T": 2048, "B": 16, "heads": 48, "dk": 128, "dv": 64,
//! "fwd_ms": [median, p20, p80], "fwd_bwd_ms": [...]}`. A time is a number or a list whose
//! first entry is the median. `"fixed": true` marks a figure measured elsewhere and carried
//! as a figure to beat (the official kernels' table); other lines are measurements of this
//! run. Lines that are not objects (a log line, say) are skipped; a line with `"error"` is
//! listed and not used.

use crate::Args;
use loglinear_host_gpu::chunk_scan::Form;
use serde_json::Value;
use std::path::Path;

/// One anchor timing and who it is ("fla, measured" or "official, fixed figure").
#[derive(Clone)]
pub struct Timing {
    pub ms: f64,
    pub who: String,
}

/// The fastest anchor of a row, for the forward and for forward + backward.
#[derive(Clone, Default)]
pub struct Best {
    pub fwd: Option<Timing>,
    pub fwd_bwd: Option<Timing>,
}

/// One usable anchor line.
struct Anchor {
    who: String,
    form: Form,
    t: usize,
    tokens: usize,
    heads: usize,
    dk: usize,
    dv: usize,
    fwd_ms: Option<f64>,
    fwd_bwd_ms: Option<f64>,
}

/// Every anchor of the `--anchors` files.
#[derive(Default)]
pub struct Anchors(Vec<Anchor>);

/// A time field: a number, or a list whose first entry is the median.
fn time_ms(v: &Value) -> Option<f64> {
    match v {
        Value::Array(a) => a.first().and_then(Value::as_f64),
        other => other.as_f64(),
    }
    .filter(|ms| ms.is_finite() && *ms > 0.0)
}

fn count(o: &Value, key: &str) -> Option<usize> {
    o.get(key)?.as_u64().and_then(|n| usize::try_from(n).ok())
}

impl Anchors {
    /// Reads every file; prints what it took and what it left out. An unreadable file, or a
    /// line that is an object without the fields above, is an error naming the file and line.
    pub fn read(paths: &[impl AsRef<Path>]) -> Result<Self, String> {
        let mut all = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--anchors {}: {e}", path.display()))?;
            for (n, line) in text.lines().enumerate() {
                let at = || format!("--anchors {} line {}", path.display(), n + 1);
                let Ok(o @ Value::Object(_)) = serde_json::from_str::<Value>(line.trim()) else {
                    continue;
                };
                let name = o["impl"].as_str().unwrap_or("anchor").to_string();
                if let Some(e) = o.get("error") {
                    println!("anchor not used ({}): {name} reported an error: {e}", at());
                    continue;
                }
                let Some(form_name) = o["form"].as_str() else {
                    return Err(format!("{}: no \"form\"", at()));
                };
                let Ok(form) = form_name.parse::<Form>() else {
                    println!(
                        "anchor not used ({}): {name} form {form_name:?} has no log-linear \
                         counterpart here",
                        at()
                    );
                    continue;
                };
                let field = |key: &str| count(&o, key).ok_or(format!("{}: no {key:?}", at()));
                let (t, batch) = (field("T")?, field("B")?);
                let fixed = o["fixed"].as_bool().unwrap_or(false);
                let anchor = Anchor {
                    who: format!(
                        "{name}, {}",
                        if fixed { "fixed figure" } else { "measured" }
                    ),
                    form,
                    t,
                    tokens: t * batch,
                    heads: field("heads")?,
                    dk: field("dk")?,
                    dv: field("dv")?,
                    fwd_ms: o.get("fwd_ms").and_then(time_ms),
                    fwd_bwd_ms: o.get("fwd_bwd_ms").and_then(time_ms),
                };
                if anchor.fwd_ms.is_none() && anchor.fwd_bwd_ms.is_none() {
                    return Err(format!("{}: neither \"fwd_ms\" nor \"fwd_bwd_ms\"", at()));
                }
                all.push(anchor);
            }
        }
        Ok(Self(all))
    }

    /// How many anchors were read.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The fastest anchors of `form` at length `t` and the benchmark's shape.
    pub fn best(&self, form: Form, t: usize, a: &Args) -> Best {
        let same = |x: &&Anchor| {
            x.form == form
                && x.t == t
                && x.tokens == a.tokens
                && x.heads == a.heads
                && x.dk == a.dk
                && x.dv == a.dv
        };
        let fastest = |ms: fn(&Anchor) -> Option<f64>| {
            self.0
                .iter()
                .filter(same)
                .filter_map(|x| {
                    ms(x).map(|ms| Timing {
                        ms,
                        who: x.who.clone(),
                    })
                })
                .min_by(|p, q| p.ms.total_cmp(&q.ms))
        };
        Best {
            fwd: fastest(|x| x.fwd_ms),
            fwd_bwd: fastest(|x| x.fwd_bwd_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_numbers_or_median_first_lists() {
        assert_eq!(time_ms(&serde_json::json!(4.5)), Some(4.5));
        assert_eq!(time_ms(&serde_json::json!([21.2, 20.9, 21.8])), Some(21.2));
        assert_eq!(time_ms(&serde_json::json!("4.5")), None);
        assert_eq!(time_ms(&serde_json::json!(-1.0)), None);
    }

    #[test]
    fn the_fastest_anchor_of_the_same_form_and_shape_wins() {
        use clap::Parser;
        let dir = std::env::temp_dir().join(format!("anchors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        let lines = [
            r#"{"impl": "fla", "form": "m2", "T": 2048, "B": 16, "heads": 48, "dk": 128, "dv": 64, "fwd_ms": [4.1, 4.0, 4.2], "fwd_bwd_ms": [21.2, 21.0, 21.5]}"#,
            r#"{"impl": "official", "fixed": true, "form": "m2", "T": 2048, "B": 16, "heads": 48, "dk": 128, "dv": 64, "fwd_ms": 4.0, "fwd_bwd_ms": 43.1}"#,
            r#"{"impl": "fla", "form": "m2", "T": 2048, "B": 16, "heads": 48, "dk": 64, "dv": 64, "fwd_ms": 1.0}"#,
            r#"{"impl": "fla", "form": "plain-gdn", "T": 2048, "B": 16, "heads": 48, "dk": 128, "dv": 64, "fwd_ms": 1.0}"#,
            r#"{"impl": "fla", "form": "m2", "T": 8192, "B": 4, "heads": 48, "dk": 128, "dv": 64, "error": "OutOfMemoryError"}"#,
            "a log line",
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let anchors = Anchors::read(&[&path]).unwrap();
        assert_eq!(
            anchors.len(),
            3,
            "the other shape is read, the rest left out"
        );
        let a = Args::parse_from(["train_bench"]);
        let best = anchors.best(Form::Mamba2, 2048, &a);
        let fwd = best.fwd.unwrap();
        assert_eq!((fwd.ms, fwd.who.as_str()), (4.0, "official, fixed figure"));
        let both = best.fwd_bwd.unwrap();
        assert_eq!((both.ms, both.who.as_str()), (21.2, "fla, measured"));
        assert!(anchors.best(Form::Gdn, 2048, &a).fwd.is_none());
        assert!(anchors.best(Form::Mamba2, 8192, &a).fwd.is_none());

        std::fs::write(&path, r#"{"impl": "fla", "form": "m2", "T": 2048}"#).unwrap();
        let e = Anchors::read(&[&path]).err().unwrap();
        assert!(e.contains("a.jsonl line 1") && e.contains("\"B\""), "{e}");
        let e = Anchors::read(&[dir.join("missing.jsonl")]).err().unwrap();
        assert!(e.contains("missing.jsonl"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
