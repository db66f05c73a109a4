//! Reading `config.json` as the official code writes it.
//!
//! The official configs contain `"time_step_limit": [0.0, Infinity]`: Python's `json` writes
//! non-finite floats as bare `Infinity`/`NaN`, which strict JSON (serde_json) rejects. fla's
//! newer configs write `{"__float__": "Infinity"}` instead. [`parse_lenient_json`] rewrites the
//! bare tokens (outside strings) into that tagged form before parsing, so both read the same.

use crate::error::ImportError;
use crate::layout::Layout;
use loglinear_runtime::config::ConfigError;
use loglinear_runtime::{ModelConfig, LAMBDA_LEVELS};
use serde_json::Value;

/// Parses JSON that may contain Python's bare `Infinity`, `-Infinity` and `NaN`.
pub fn parse_lenient_json(text: &str) -> Result<Value, serde_json::Error> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        let mut replaced = false;
        for (tok, tag) in [
            ("-Infinity", "-Infinity"),
            ("Infinity", "Infinity"),
            ("NaN", "NaN"),
        ] {
            if rest.starts_with(tok) {
                out.push_str(&format!("{{\"__float__\": \"{tag}\"}}"));
                rest = &rest[tok.len()..];
                replaced = true;
                break;
            }
        }
        if !replaced {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    serde_json::from_str(&out)
}

/// A float that may be written `{"__float__": "Infinity"}`.
fn as_float(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => match o.get("__float__")?.as_str()? {
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => None,
        },
        _ => None,
    }
}

/// The largest dimension a config may give (hidden_size, heads, head widths, vocabulary,
/// layers, ...): 2^32, the most token ids a u32 holds; every real model is far below it.
const MAX_DIMENSION: usize = 1 << 32;

/// `a · b`, or an error naming the keys whose product overflows.
fn product(a: (&str, usize), b: (&str, usize)) -> Result<usize, ImportError> {
    a.1.checked_mul(b.1)
        .ok_or_else(|| ImportError::ConfigField {
            key: a.0.into(),
            problem: format!("{} = {} times {} = {} overflows", a.0, a.1, b.0, b.1),
        })
}

struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    /// A dimension: a whole number up to [`MAX_DIMENSION`], so that the sizes made of them
    /// are named by their key when they cannot be.
    fn usize(&self, key: &str, default: Option<usize>) -> Result<usize, ImportError> {
        let n = match self.get(key) {
            None => default.ok_or_else(|| ImportError::ConfigField {
                key: key.into(),
                problem: "missing".into(),
            })?,
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| ImportError::ConfigField {
                    key: key.into(),
                    problem: format!("expected a non-negative integer, found {v}"),
                })?,
        };
        if n > MAX_DIMENSION {
            return Err(ImportError::ConfigField {
                key: key.into(),
                problem: format!(
                    "{n} is larger than any model dimension can be ({MAX_DIMENSION} at most)"
                ),
            });
        }
        Ok(n)
    }

    /// The norm epsilon under `key`: a finite number ≥ 0 once narrowed to f32.
    fn norm_eps(&self, key: &str, default: f64) -> Result<f32, ImportError> {
        let given = self.f64(key, default)?;
        let eps = given as f32;
        if !(eps.is_finite() && eps >= 0.0) {
            let found = match eps.is_infinite() && given.is_finite() {
                true => format!("{given}, beyond f32"),
                false => given.to_string(),
            };
            return Err(ImportError::ConfigField {
                key: key.into(),
                problem: format!("the norm epsilon must be a finite number ≥ 0, found {found}"),
            });
        }
        Ok(eps)
    }

    fn f64(&self, key: &str, default: f64) -> Result<f64, ImportError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => as_float(v).ok_or_else(|| ImportError::ConfigField {
                key: key.into(),
                problem: format!("expected a number, found {v}"),
            }),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ImportError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| ImportError::ConfigField {
                key: key.into(),
                problem: format!("expected true or false, found {v}"),
            }),
        }
    }

    /// Fails unless `key` is absent or equal to `want`: for options the runtime does not implement.
    fn require_bool(&self, key: &str, want: bool) -> Result<(), ImportError> {
        if self.bool(key, want)? != want {
            return Err(ImportError::Unsupported(format!(
                "`{key}: {}` is not supported",
                !want
            )));
        }
        Ok(())
    }
}

/// fla `GatedMLP`: intermediate = 256·⌈⌊D·ratio·2/3⌋ / 256⌉ unless given.
fn mlp_intermediate(f: &Fields<'_>, hidden: usize) -> Result<usize, ImportError> {
    if let Some(i) = f.get("intermediate_size") {
        let _ = i;
        return f.usize("intermediate_size", None);
    }
    let ratio = f.usize("hidden_ratio", Some(4))?;
    let raw = product(("hidden_size", hidden), ("hidden_ratio", ratio))?;
    let raw = product(("hidden_size", raw), ("2", 2))? / 3;
    // ⌈raw / 256⌉ · 256 ≤ raw + 255, which fits: raw is at most 2/3 of a product that fitted.
    Ok(raw.div_ceil(256) * 256)
}

/// Builds the runtime's [`ModelConfig`] from a parsed `config.json`, checking every option that
/// would change the maths.
pub fn parse_config(v: &Value) -> Result<(ModelConfig, Layout), ImportError> {
    let f = Fields(v);
    let model_type =
        f.get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| ImportError::ConfigField {
                key: "model_type".into(),
                problem: "missing or not a string".into(),
            })?;
    let layout = Layout::from_model_type(model_type)
        .ok_or_else(|| ImportError::Unsupported(format!("model_type `{model_type}`")))?;
    let arch = layout.arch();
    let hidden = f.usize("hidden_size", None)?;
    let vocab = f.usize("vocab_size", None)?;
    let layers = f.usize("num_hidden_layers", None)?;
    if f.bool("tie_word_embeddings", false)? {
        return Err(ImportError::Unsupported(
            "tied embeddings (`tie_word_embeddings: true`)".into(),
        ));
    }
    let lambda_levels = if arch.is_log_linear() {
        LAMBDA_LEVELS
    } else {
        0
    };
    let config = if arch.is_mamba2() {
        let heads = f.usize("num_heads", None)?;
        let head_dim = f.usize("head_dim", Some(64))?;
        let expand = f.usize("expand", Some(2))?;
        let d_inner = product(("num_heads", heads), ("head_dim", head_dim))?;
        let expanded = product(("hidden_size", hidden), ("expand", expand))?;
        if d_inner != expanded {
            return Err(ImportError::ConfigField {
                key: "num_heads".into(),
                problem: format!(
                    "num_heads·head_dim = {d_inner} but expand·hidden_size = {expanded}"
                ),
            });
        }
        let groups = f.usize("n_groups", Some(1))?;
        let eps_key = if layout == Layout::FlaLogLinearMamba2 {
            "norm_eps"
        } else {
            "layer_norm_epsilon"
        };
        f.require_bool("use_bias", false)?;
        f.require_bool("residual_in_fp32", false)?;
        f.require_bool("norm_before_gate", false)?;
        for key in ["time_step_limit", "dt_limit"] {
            if let Some(lim) = f.get(key) {
                let pair = lim
                    .as_array()
                    .map(|a| a.iter().map(as_float).collect::<Vec<_>>());
                match pair.as_deref() {
                    Some([Some(lo), Some(hi)]) if *lo == 0.0 && hi.is_infinite() && *hi > 0.0 => {}
                    _ => {
                        return Err(ImportError::Unsupported(format!(
                            "`{key}: {lim}`: only (0, inf) (no dt clamping) is supported"
                        )))
                    }
                }
            }
        }
        ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            num_layers: layers,
            intermediate_size: mlp_intermediate(&f, hidden)?,
            norm_eps: f.norm_eps(eps_key, 1e-5)?,
            num_heads: heads,
            head_k_dim: f.usize("state_size", Some(128))?,
            head_v_dim: head_dim,
            num_groups: groups,
            conv_kernel: f.usize("conv_kernel", Some(4))?,
            conv_bias: f.bool("use_conv_bias", true)?,
            // Official RMSNormGated normalises the whole d_inner; fla passes d_inner / groups.
            norm_group_size: if layout == Layout::FlaLogLinearMamba2 && groups > 0 {
                d_inner / groups
            } else {
                d_inner
            },
            lambda_levels,
        }
    } else {
        let heads = f.usize("num_heads", None)?;
        let head_dim = f.usize("head_dim", None)?;
        let expand_v = f64::from(f.f64("expand_v", 2.0)? as f32);
        let dv = head_dim as f64 * expand_v;
        if dv.fract() != 0.0 || dv <= 0.0 || dv > MAX_DIMENSION as f64 {
            return Err(ImportError::ConfigField {
                key: "expand_v".into(),
                problem: format!(
                    "head_dim·expand_v = {dv} is not a positive integer of at most \
                     {MAX_DIMENSION}"
                ),
            });
        }
        f.require_bool("use_gate", true)?;
        f.require_bool("use_short_conv", true)?;
        if f.get("attn").is_some() {
            return Err(ImportError::Unsupported(
                "hybrid attention layers (`attn`)".into(),
            ));
        }
        ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            num_layers: layers,
            intermediate_size: mlp_intermediate(&f, hidden)?,
            norm_eps: f.norm_eps("norm_eps", 1e-6)?,
            num_heads: heads,
            head_k_dim: head_dim,
            head_v_dim: dv as usize,
            num_groups: heads,
            conv_kernel: f.usize("conv_size", Some(4))?,
            conv_bias: false,
            norm_group_size: dv as usize,
            lambda_levels,
        }
    };
    config.validate().map_err(|e| match e {
        ConfigError::ZeroDimension(field) => ImportError::ConfigField {
            key: json_key(arch.is_mamba2(), field).into(),
            problem: "0: it must be at least 1".into(),
        },
        e => ImportError::Unsupported(e.to_string()),
    })?;
    Ok((config, layout))
}

/// The `config.json` key a [`ModelConfig`] field is read from.
fn json_key(mamba2: bool, field: &str) -> &str {
    match (field, mamba2) {
        ("num_layers", _) => "num_hidden_layers",
        ("head_k_dim", true) => "state_size",
        ("head_k_dim", false) | ("head_v_dim", true) => "head_dim",
        ("head_v_dim", false) => "expand_v",
        ("num_groups", true) => "n_groups",
        ("num_groups", false) => "num_heads",
        ("conv_kernel", false) => "conv_size",
        (field, _) => field,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_infinity_and_nan_parse_outside_strings_only() {
        let v = parse_lenient_json(
            r#"{"a": [0.0, Infinity], "b": "Infinity NaN", "c": -Infinity, "d": NaN}"#,
        )
        .unwrap();
        assert_eq!(as_float(&v["a"][1]), Some(f64::INFINITY));
        assert_eq!(v["b"], "Infinity NaN");
        assert_eq!(as_float(&v["c"]), Some(f64::NEG_INFINITY));
        assert!(as_float(&v["d"]).unwrap().is_nan());
    }

    #[test]
    fn escaped_quotes_do_not_end_strings() {
        let v = parse_lenient_json(r#"{"a": "x\"Infinity", "b": Infinity}"#).unwrap();
        assert_eq!(v["a"], "x\"Infinity");
        assert_eq!(as_float(&v["b"]), Some(f64::INFINITY));
    }

    #[test]
    fn unsupported_options_are_named() {
        let v: Value = serde_json::json!({"model_type": "h_gated_deltanet", "hidden_size": 8,
            "vocab_size": 4, "num_hidden_layers": 1, "num_heads": 1, "head_dim": 8, "use_gate": false});
        let e = parse_config(&v).unwrap_err().to_string();
        assert!(e.contains("use_gate"), "{e}");
        let v: Value = serde_json::json!({"model_type": "llama"});
        assert!(parse_config(&v).unwrap_err().to_string().contains("llama"));
        let v: Value = serde_json::json!({"model_type": "hattention", "hidden_size": 8});
        assert!(parse_config(&v)
            .unwrap_err()
            .to_string()
            .contains("vocab_size"));
    }
}
