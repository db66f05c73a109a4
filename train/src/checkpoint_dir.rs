//! Training checkpoints in the official layout, for exact resume.
//!
//! A checkpoint is a folder:
//! * `config.json`: the official config of the architecture (what the official config class
//!   writes), so `loglinear convert <folder>` and the PyTorch stack load it;
//! * `model.safetensors`: every parameter in f32 under its official key and shape;
//! * `optimizer.safetensors`: AdamW's moments, `<key>.exp_avg` and `<key>.exp_avg_sq`;
//! * `trainer_state.json`: step, generator state, tokens seen, learning rate, validation
//!   results and the run's settings.
//!
//! Saving is crash-safe: everything is written into `<name>.tmp/` and synced, the old folder is
//! renamed to `<name>.old/`, the new one into place, and the old one removed. A crash leaves
//! either the new or the old folder complete, and [`find`] picks whichever exists.

use loglinear_converter::error::safetensors_problem;
use loglinear_converter::layout::Layout;
use loglinear_runtime::{Arch, ModelConfig};
use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be written or read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
    #[error("no official config for this model: {0}")]
    Config(String),
    #[error(transparent)]
    Output(#[from] loglinear_converter::output_file::OutputFileError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn format_err(path: &Path, message: impl Into<String>) -> CheckpointError {
    CheckpointError::Format {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A number as the shortest decimal that reads back as the same f32 (`1e-6`, not
/// `9.99999997e-7`).
fn f32_number(x: f32) -> Value {
    x.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// The official `config.json` of a model, in the fields and order the official config class
/// writes (compare models/*/config.json), for a model that comes without one (a GGUF file):
/// `h_gated_deltanet` / fla's `gated_deltanet` for Gated DeltaNet, `hattention` /
/// `mamba2mlp` for Mamba-2. `parse_config` reads it back to the same [`ModelConfig`].
pub fn official_config(c: &ModelConfig) -> Result<(Value, Layout), CheckpointError> {
    if c.arch.is_mamba2() {
        mamba2_config(c)
    } else {
        gdn_config(c)
    }
}

fn gdn_config(c: &ModelConfig) -> Result<(Value, Layout), CheckpointError> {
    let (layout, class, model_type) = match c.arch {
        Arch::LogLinearGatedDeltaNet => (
            Layout::HGatedDeltaNet,
            "HGatedDeltaNetForCausalLM",
            "h_gated_deltanet",
        ),
        _ => (
            Layout::GatedDeltaNet,
            "GatedDeltaNetForCausalLM",
            "gated_deltanet",
        ),
    };
    let official = c.num_groups == c.num_heads
        && !c.conv_bias
        && c.norm_group_size == c.head_v_dim
        && c.head_k_dim > 0;
    if !official {
        return Err(CheckpointError::Config(
            "groups, conv bias or norm groups differ from the official GDN layout".into(),
        ));
    }
    let expand_v = c.head_v_dim as f64 / c.head_k_dim as f64;
    let expand_v = if expand_v.fract() == 0.0 {
        json!(expand_v as u64)
    } else {
        json!(expand_v)
    };
    let v = json!({
        "architectures": [class],
        "attn": null,
        "attn_mode": "chunk",
        "bos_token_id": null,
        "conv_size": c.conv_kernel,
        "eos_token_id": null,
        "expand_v": expand_v,
        "fuse_cross_entropy": true,
        "fuse_norm": true,
        "fuse_swiglu": true,
        "head_dim": c.head_k_dim,
        "hidden_act": "swish",
        "hidden_ratio": 4,
        "hidden_size": c.hidden_size,
        "initializer_range": 0.006,
        "intermediate_size": c.intermediate_size,
        "max_position_embeddings": 2048,
        "model_type": model_type,
        "norm_eps": f32_number(c.norm_eps),
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "tie_word_embeddings": false,
        "torch_dtype": "float32",
        "use_cache": true,
        "use_gate": true,
        "use_short_conv": true,
        "vocab_size": c.vocab_size
    });
    Ok((v, layout))
}

fn mamba2_config(c: &ModelConfig) -> Result<(Value, Layout), CheckpointError> {
    let d_inner = c.num_heads * c.head_v_dim;
    if c.hidden_size == 0 || d_inner % c.hidden_size != 0 || c.norm_group_size != d_inner {
        return Err(CheckpointError::Config(format!(
            "d_inner {d_inner} is not a multiple of hidden {} or the gated norm is grouped \
             (fla's log_linear_mamba2 layout)",
            c.hidden_size
        )));
    }
    let (layout, model_type) = match c.arch {
        Arch::LogLinearMamba2 => (Layout::Hattention, "hattention"),
        _ => (Layout::Mamba2Mlp, "mamba2mlp"),
    };
    let mut v = json!({
        "bos_token_id": null,
        "chunk_size": 256,
        "conv_kernel": c.conv_kernel,
        "eos_token_id": null,
        "expand": d_inner / c.hidden_size,
        "fuse_cross_entropy": true,
        "fuse_norm": true,
        "head_dim": c.head_v_dim,
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "initializer_range": 0.006,
        "intermediate_size": c.intermediate_size,
        "layer_norm_epsilon": f32_number(c.norm_eps),
        "model_type": model_type,
        "n_groups": c.num_groups,
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "pad_token_id": null,
        "rescale_prenorm_residual": true,
        "residual_in_fp32": false,
        "rms_norm": true,
        "state_size": c.head_k_dim,
        "tie_word_embeddings": false,
        "time_step_floor": 0.0001,
        "time_step_max": 0.1,
        "time_step_min": 0.001,
        "torch_dtype": "float32",
        "use_bias": false,
        "use_cache": true,
        "use_conv_bias": c.conv_bias,
        "vocab_size": c.vocab_size
    });
    // The official class name is known for the log-linear model only.
    if layout == Layout::Hattention {
        v["architectures"] = json!(["HAttentionForCausalLM"]);
    }
    Ok((v, layout))
}

/// The trainer's own state: where the run is and how it was set up.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainerState {
    /// Optimizer steps taken.
    pub step: u64,
    /// The window generator's state after the last step.
    pub rng_state: u64,
    /// Training tokens predicted so far.
    pub tokens_seen: u64,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Training loss of the last step (nats per token).
    pub loss: f64,
    /// Latest and best validation bits per token, if measured.
    pub last_val_bpt: Option<f64>,
    pub best_val_bpt: Option<f64>,
    /// The run's settings (a resumed run must match them, see `run`).
    pub settings: Value,
}

impl TrainerState {
    pub fn to_json(&self) -> Value {
        json!({
            "format": "loglinear-trainer-state-1",
            "step": self.step,
            // A string: JSON readers that hold numbers in doubles would round a u64.
            "rng_state": self.rng_state.to_string(),
            "tokens_seen": self.tokens_seen,
            "lr": self.lr,
            "loss": self.loss,
            "last_val_bits_per_token": self.last_val_bpt,
            "best_val_bits_per_token": self.best_val_bpt,
            "settings": self.settings,
        })
    }

    pub fn from_json(path: &Path, v: &Value) -> Result<Self, CheckpointError> {
        let u = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| format_err(path, format!("`{k}` missing or not an integer")))
        };
        let f = |k: &str| {
            v.get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format_err(path, format!("`{k}` missing or not a number")))
        };
        let rng_state = v
            .get("rng_state")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| format_err(path, "`rng_state` missing or not a u64 string"))?;
        Ok(Self {
            step: u("step")?,
            rng_state,
            tokens_seen: u("tokens_seen")?,
            lr: f("lr")?,
            loss: f("loss")?,
            last_val_bpt: v.get("last_val_bits_per_token").and_then(Value::as_f64),
            best_val_bpt: v.get("best_val_bits_per_token").and_then(Value::as_f64),
            settings: v.get("settings").cloned().unwrap_or(Value::Null),
        })
    }
}

/// Everything a checkpoint holds, in memory.
#[derive(Clone, Debug)]
pub struct CheckpointData {
    /// `config.json`'s text.
    pub config_json: String,
    /// (key, shape, values) of every parameter.
    pub params: Vec<(String, Vec<usize>, Vec<f32>)>,
    /// (exp_avg, exp_avg_sq) per parameter, in `params` order.
    pub moments: Vec<(Vec<f32>, Vec<f32>)>,
    /// AdamW's step count (the bias corrections' t).
    pub optimizer_steps: u64,
    pub state: TrainerState,
}

fn f32_bytes(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A safetensors file of f32 tensors with `metadata`.
fn safetensors_bytes(
    path: &Path,
    tensors: &[(String, Vec<usize>, Vec<u8>)],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>, CheckpointError> {
    let views = tensors
        .iter()
        .map(|(k, shape, bytes)| {
            safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|v| (k.clone(), v))
                .map_err(|e| format_err(path, format!("tensor `{k}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, Some(metadata)).map_err(|e| format_err(path, e.to_string()))
}

/// Writes `bytes` to `path` atomically, through the host tools' one writer.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    Ok(loglinear_converter::output_file::write_atomic(path, bytes)?)
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Saves `data` as the checkpoint folder `dir`, replacing any previous one crash-safely.
pub fn save(dir: &Path, data: &CheckpointData) -> Result<(), CheckpointError> {
    if data.moments.len() != data.params.len() {
        return Err(format_err(dir, "moments and parameters differ in number"));
    }
    let tmp = sibling(dir, ".tmp");
    let old = sibling(dir, ".old");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;

    write_atomic(&tmp.join("config.json"), data.config_json.as_bytes())?;
    let pt = HashMap::from([("format".to_string(), "pt".to_string())]);
    let model: Vec<_> = data
        .params
        .iter()
        .map(|(k, shape, v)| (k.clone(), shape.clone(), f32_bytes(v)))
        .collect();
    let path = tmp.join("model.safetensors");
    write_atomic(&path, &safetensors_bytes(&path, &model, pt)?)?;
    let mut moments = Vec::with_capacity(2 * data.params.len());
    for ((k, shape, _), (m, v)) in data.params.iter().zip(&data.moments) {
        moments.push((format!("{k}.exp_avg"), shape.clone(), f32_bytes(m)));
        moments.push((format!("{k}.exp_avg_sq"), shape.clone(), f32_bytes(v)));
    }
    // One metadata key only: safetensors writes a map's keys in hash order, and a checkpoint
    // should be the same bytes whenever its contents are.
    let meta = HashMap::from([("step".to_string(), data.optimizer_steps.to_string())]);
    let path = tmp.join("optimizer.safetensors");
    write_atomic(&path, &safetensors_bytes(&path, &moments, meta)?)?;
    let state = serde_json::to_string_pretty(&data.state.to_json())
        .map_err(|e| format_err(dir, e.to_string()))?;
    write_atomic(&tmp.join("trainer_state.json"), state.as_bytes())?;
    // The folder's entries are durable before it is renamed into place.
    if let Ok(d) = std::fs::File::open(&tmp) {
        let _ = d.sync_all();
    }

    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    if dir.exists() {
        std::fs::rename(dir, &old).map_err(io(dir))?;
    }
    std::fs::rename(&tmp, dir).map_err(io(dir))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    Ok(())
}

/// The complete checkpoint folder for `dir`: `dir` itself, or `dir.old` when a crash came
/// between the two renames of [`save`]; `None` when there is neither.
pub fn find(dir: &Path) -> Option<PathBuf> {
    let old = sibling(dir, ".old");
    if dir.join("trainer_state.json").is_file() {
        Some(dir.to_path_buf())
    } else if old.join("trainer_state.json").is_file() {
        Some(old)
    } else {
        None
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    std::fs::read(path).map_err(io(path))
}

/// Tensors by key: (shape, f32 values).
type TensorMap = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// The f32 tensors of a safetensors file by key, with its metadata.
fn read_f32_tensors(path: &Path) -> Result<(TensorMap, HashMap<String, String>), CheckpointError> {
    let bytes = read(path)?;
    let st =
        SafeTensors::deserialize(&bytes).map_err(|e| format_err(path, safetensors_problem(&e)))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| format_err(path, safetensors_problem(&e)))?;
    let mut out = HashMap::new();
    for (k, v) in st.tensors() {
        if v.dtype() != Dtype::F32 {
            return Err(format_err(
                path,
                format!("tensor `{k}` is {}, expected F32", v.dtype()),
            ));
        }
        let data = v
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.insert(k, (v.shape().to_vec(), data));
    }
    Ok((out, meta.metadata().clone().unwrap_or_default()))
}

/// Loads a checkpoint folder written by [`save`]: parameters in the order `keys` gives.
pub fn load(dir: &Path, keys: &[String]) -> Result<CheckpointData, CheckpointError> {
    let cfg_path = dir.join("config.json");
    let config_json = String::from_utf8_lossy(&read(&cfg_path)?).into_owned();
    let model_path = dir.join("model.safetensors");
    let (mut model, _) = read_f32_tensors(&model_path)?;
    let opt_path = dir.join("optimizer.safetensors");
    let (mut opt, meta) = read_f32_tensors(&opt_path)?;
    let optimizer_steps = meta
        .get("step")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format_err(&opt_path, "metadata `step` missing"))?;
    let mut params = Vec::with_capacity(keys.len());
    let mut moments = Vec::with_capacity(keys.len());
    for k in keys {
        let (shape, v) = model
            .remove(k)
            .ok_or_else(|| format_err(&model_path, format!("tensor `{k}` missing")))?;
        let mut take = |name: String| {
            opt.remove(&name)
                .map(|(_, d)| d)
                .ok_or_else(|| format_err(&opt_path, format!("tensor `{name}` missing")))
        };
        let m = take(format!("{k}.exp_avg"))?;
        let s = take(format!("{k}.exp_avg_sq"))?;
        params.push((k.clone(), shape, v));
        moments.push((m, s));
    }
    if let Some(extra) = model.keys().next() {
        return Err(format_err(
            &model_path,
            format!("tensor `{extra}` is not a parameter of this model"),
        ));
    }
    let state_path = dir.join("trainer_state.json");
    let state_json: Value = serde_json::from_slice(&read(&state_path)?)
        .map_err(|e| format_err(&state_path, e.to_string()))?;
    Ok(CheckpointData {
        config_json,
        params,
        moments,
        optimizer_steps,
        state: TrainerState::from_json(&state_path, &state_json)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loglinear_converter::config_json::{parse_config, parse_lenient_json};

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("loglinear-ckpt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn official_config_reads_back_to_the_same_model_config() {
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu/config.json"),
        );
        let base = match shipped {
            Ok(text) => parse_config(&parse_lenient_json(&text).unwrap()).unwrap().0,
            Err(_) => return,
        };
        for (hidden, heads, dk, dv, layers) in [(128, 2, 64, 128, 4), (16, 2, 8, 16, 1)] {
            let c = ModelConfig {
                hidden_size: hidden,
                num_heads: heads,
                num_groups: heads,
                head_k_dim: dk,
                head_v_dim: dv,
                norm_group_size: dv,
                num_layers: layers,
                ..base
            };
            let (json, layout) = official_config(&c).unwrap();
            assert_eq!(layout, Layout::HGatedDeltaNet);
            let (back, l2) = parse_config(&json).unwrap();
            assert_eq!(back, c);
            assert_eq!(l2, layout);
        }
        assert_eq!(official_config(&base).unwrap().0["norm_eps"], json!(1e-6));
        let m2 = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-mamba2-mcu/config.json"),
        )
        .unwrap();
        let (m2, layout) = parse_config(&parse_lenient_json(&m2).unwrap()).unwrap();
        for arch in [Arch::LogLinearMamba2, Arch::Mamba2] {
            let c = ModelConfig {
                arch,
                lambda_levels: if arch.is_log_linear() {
                    m2.lambda_levels
                } else {
                    0
                },
                ..m2
            };
            let (json, l) = official_config(&c).unwrap();
            assert_eq!(parse_config(&json).unwrap(), (c, l));
        }
        assert_eq!(official_config(&m2).unwrap().1, layout);
    }

    #[test]
    fn save_and_load_round_trip_and_survive_a_crash_between_renames() {
        let out = temp_dir("roundtrip");
        let dir = out.join("checkpoint");
        let data = CheckpointData {
            config_json: "{\"model_type\": \"h_gated_deltanet\"}".into(),
            params: vec![
                (
                    "model.a".into(),
                    vec![2, 3],
                    (0..6).map(|x| x as f32).collect(),
                ),
                ("model.b".into(), vec![4, 1, 2], vec![0.5; 8]),
            ],
            moments: vec![(vec![1.0; 6], vec![2.0; 6]), (vec![3.0; 8], vec![4.0; 8])],
            optimizer_steps: 17,
            state: TrainerState {
                step: 17,
                rng_state: u64::MAX - 3,
                tokens_seen: 1234,
                lr: 1e-3,
                loss: 2.5,
                last_val_bpt: Some(3.0),
                best_val_bpt: None,
                settings: json!({"batch": 2}),
            },
        };
        save(&dir, &data).unwrap();
        let keys = vec!["model.a".to_string(), "model.b".to_string()];
        let back = load(&find(&dir).unwrap(), &keys).unwrap();
        assert_eq!(back.params, data.params);
        assert_eq!(back.moments, data.moments);
        assert_eq!(back.optimizer_steps, 17);
        assert_eq!(back.state, data.state);
        assert_eq!(back.config_json, data.config_json);
        // Saving again replaces it; no temporary folders stay behind.
        let mut next = data.clone();
        next.state.step = 18;
        save(&dir, &next).unwrap();
        assert_eq!(load(&dir, &keys).unwrap().state.step, 18);
        assert!(!sibling(&dir, ".tmp").exists() && !sibling(&dir, ".old").exists());
        // A crash after the first rename leaves only `.old`: it is found.
        std::fs::rename(&dir, sibling(&dir, ".old")).unwrap();
        assert_eq!(find(&dir), Some(sibling(&dir, ".old")));
        save(&dir, &data).unwrap();
        assert_eq!(find(&dir), Some(dir.clone()));
        // Wrong keys are named errors.
        let e = load(&dir, &["model.c".to_string()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("model.c"), "{e}");
        let e = load(&dir, &keys[..1]).unwrap_err().to_string();
        assert!(e.contains("model.b"), "{e}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}
