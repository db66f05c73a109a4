//! Writes a model file with random weights at any shape, for timing: the official 760M-class
//! shapes (`--preset ll-gdn-mid` or `ll-mamba2-mid`, spec §10's `h_gated_deltanet_mid.json` and
//! `hattention_mid.json`) or any `config.json`. The text it writes is noise; its speed is the
//! trained model's.
//!
//! ```text
//! cargo run -p loglinear-tests --release --example make_random_model -- \
//!     --preset ll-gdn-mid --type q8_0 -o /tmp/ll-gdn-mid-q8_0.gguf
//! ```

use clap::{Parser, ValueEnum};
use loglinear_converter::config_json::{parse_config, parse_lenient_json};
use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_converter::output_file::write_atomic;
use loglinear_converter::{Tensor, TensorStore};
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::DType;
use std::path::PathBuf;

/// The official mid-size (760M-class) configs, as the paper's repository ships them; the
/// fields left out take the fla defaults that `parse_config` applies.
const LL_GDN_MID: &str = r#"{"model_type": "h_gated_deltanet", "hidden_size": 1536,
    "head_dim": 192, "num_heads": 6, "num_hidden_layers": 21, "vocab_size": 32000,
    "tie_word_embeddings": false, "max_position_embeddings": 16384}"#;
const LL_MAMBA2_MID: &str = r#"{"model_type": "hattention", "hidden_size": 1536,
    "num_heads": 48, "num_hidden_layers": 21, "vocab_size": 32000,
    "tie_word_embeddings": false}"#;

#[derive(Parser)]
#[command(about = "Writes a GGUF model with random weights, for timing")]
struct Args {
    /// A built-in shape: the official 760M-class Log-Linear Gated DeltaNet or Mamba-2.
    #[arg(
        long,
        value_enum,
        conflicts_with = "config",
        required_unless_present = "config"
    )]
    preset: Option<Preset>,
    /// A config.json (official layout) to take the shape from.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Matrix type: f32, q8_0 or q4_0.
    #[arg(long = "type", default_value = "q8_0", value_parser = parse_type)]
    matrix_type: DType,
    /// Weights are uniform in [-scale, scale).
    #[arg(long, default_value_t = 0.02)]
    scale: f32,
    /// Seed of the weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The GGUF file to write.
    #[arg(short = 'o', long)]
    output: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum Preset {
    LlGdnMid,
    LlMamba2Mid,
}

fn parse_type(s: &str) -> Result<DType, String> {
    match s {
        "f32" => Ok(DType::F32),
        "q8_0" => Ok(DType::Q8_0),
        "q4_0" => Ok(DType::Q4_0),
        other => Err(format!("{other}: expected f32, q8_0 or q4_0")),
    }
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

fn main() {
    let a = Args::parse();
    let (name, text) = match (a.preset, &a.config) {
        (Some(Preset::LlGdnMid), _) => ("ll-gdn-mid".to_string(), LL_GDN_MID.to_string()),
        (Some(Preset::LlMamba2Mid), _) => ("ll-mamba2-mid".to_string(), LL_MAMBA2_MID.into()),
        (None, Some(path)) => (
            format!("random {}", path.display()),
            std::fs::read_to_string(path)
                .unwrap_or_else(|e| fail(format!("{}: {e}", path.display()))),
        ),
        (None, None) => fail("give --preset or --config"),
    };
    let json = parse_lenient_json(&text).unwrap_or_else(|e| fail(format!("{name}: {e}")));
    let (config, _) = parse_config(&json).unwrap_or_else(|e| fail(format!("{name}: {e}")));
    let mut rng = SplitMix64::new(a.seed);
    let mut store = TensorStore::default();
    let mut weights = 0usize;
    for tensor in config.tensor_names() {
        let (rows, cols) = config.tensor_shape(tensor.role);
        let data = (0..rows * cols)
            .map(|_| (2.0 * rng.unit_f32() - 1.0) * a.scale)
            .collect();
        weights += rows * cols;
        store.insert(tensor, Tensor { rows, cols, data });
    }
    eprintln!(
        "{name}: {weights} weights, quantizing to {:?}…",
        a.matrix_type
    );
    let opts = ExportOptions {
        name: Some(name.clone()),
        matrix_type: a.matrix_type,
        ..Default::default()
    };
    let bytes = ExportedModel::from_source(config, &store, &opts, &mut |_| {})
        .and_then(|m| m.to_gguf())
        .unwrap_or_else(|e| fail(format!("{name}: {e}")));
    write_atomic(&a.output, &bytes).unwrap_or_else(|e| fail(e));
    println!(
        "{} ({} bytes, {weights} weights)",
        a.output.display(),
        bytes.len()
    );
}
