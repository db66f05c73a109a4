//! The flags several subcommands share, defined once so that each idea has one spelling:
//! `--model`/`-m`, `--output`/`-o`, `--context`, `--levels`, `--state`, `--seed`, `--threads`,
//! `--json`, and the sampling settings.

use clap::ValueEnum;
use loglinear_runtime::quant::Activations;
use loglinear_runtime::sampler::SamplerConfig;
use std::path::{Path, PathBuf};

/// The model a subcommand reads: `--model FILE` (`-m`), or the same path given as the first
/// positional argument, as `loglinear inspect model.gguf` reads.
#[derive(clap::Args, Clone, Debug)]
#[group(required = true, multiple = false)]
pub(crate) struct ModelArg {
    /// GGUF model file or checkpoint folder (config.json + model.safetensors), e.g.
    /// models/ll-gdn-mcu-q8_0.gguf.
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    flag: Option<PathBuf>,
    /// The same as --model.
    #[arg(value_name = "MODEL")]
    positional: Option<PathBuf>,
}

impl ModelArg {
    /// The spelling used, for messages: `--model`, or `MODEL` for the positional.
    pub(crate) fn flag(&self) -> &'static str {
        match self.flag {
            Some(_) => "--model",
            None => "MODEL",
        }
    }

    /// The path given, by either spelling.
    pub(crate) fn path(&self) -> &Path {
        // The group requires exactly one of the two.
        self.flag
            .as_deref()
            .or(self.positional.as_deref())
            .unwrap_or(Path::new(""))
    }
}

/// `--threads`: 1 to 4096 (a larger count is a typo, not a machine).
pub(crate) fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!("{s} is not a thread count: give 1 to 4096")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StateDtype {
    F32,
    F16,
}

impl StateDtype {
    /// The name `--state` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StateDtype::F32 => "f32",
            StateDtype::F16 => "f16",
        }
    }
}

/// `--activations`: how matvecs with quantized weights treat their input.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ActivationsArg {
    /// f32 maths (the reference).
    F32,
    /// Quantize inputs to Q8 blocks and use the integer kernels (faster).
    Q8,
}

impl ActivationsArg {
    pub(crate) fn mode(self) -> Activations {
        match self {
            ActivationsArg::F32 => Activations::F32,
            ActivationsArg::Q8 => Activations::Q8,
        }
    }
}

/// Sampling settings shared by `generate` and `serial`.
#[derive(clap::Args, Clone, Copy, Debug)]
pub(crate) struct SamplingArgs {
    /// Softmax temperature, a number ≥ 0; 0 picks the most likely token (greedy).
    #[arg(long, default_value_t = 0.8, value_parser = parse_temperature)]
    pub(crate) temperature: f32,
    /// Sample only among the K most likely tokens, K ≥ 1; a K at or above the vocabulary
    /// keeps every token (default: no cut).
    #[arg(long, value_name = "K", value_parser = parse_top_k)]
    pub(crate) top_k: Option<u32>,
    /// Sample only among the most likely tokens whose probabilities add up to P, in (0, 1];
    /// 1 keeps every token.
    #[arg(long, value_name = "P", default_value_t = 1.0, value_parser = parse_top_p)]
    pub(crate) top_p: f32,
    /// Seed of the sampler's random numbers.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
}

impl SamplingArgs {
    pub(crate) fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            // The sampler's and the serial protocol's "no cut".
            top_k: self.top_k.map_or(0, |k| k as usize),
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// `--top-k`: a whole number ≥ 1. Token ids are u32, so any K from u32::MAX up cuts nothing,
/// as u32::MAX does: a larger K is taken as that, not refused.
fn parse_top_k(s: &str) -> Result<u32, String> {
    match parse_at_most(s) {
        Ok(k) if k >= 1 => Ok(u32::try_from(k).unwrap_or(u32::MAX)),
        _ => Err(format!(
            "{s} is not a top-k: give a whole number ≥ 1 (one at or above the vocabulary \
             size cuts nothing)"
        )),
    }
}

/// A whole number that is an upper limit (`--bytes`: use at most this many): one too large
/// for a machine word limits nothing, as usize::MAX does, so it is taken as that.
pub(crate) fn parse_at_most(s: &str) -> Result<usize, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s} is not a whole number ≥ 0"));
    }
    // Only digits: parsing fails on overflow alone.
    Ok(s.parse::<usize>().unwrap_or(usize::MAX))
}

/// `--temperature`: a finite number ≥ 0.
fn parse_temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!(
            "{s} is not a temperature: give a number ≥ 0 (0 = greedy)"
        )),
    }
}

/// `--top-p`: a number in (0, 1].
fn parse_top_p(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!(
            "{s} is not a top-p: give a number above 0 and at most 1"
        )),
    }
}

/// The shipped model that `generate` and `bench` run without `--model`, relative to the
/// repository root.
pub(crate) const DEFAULT_MODEL: &str = "models/ll-gdn-mcu-q8_0.gguf";

/// The default model found from the binary, not the current folder: in the repository that
/// holds the binary (`target/<profile>/loglinear`), else in the one it was built from.
pub(crate) fn default_model() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().ok();
    let roots = exe
        .iter()
        .flat_map(|e| e.ancestors().skip(1))
        .map(Path::to_path_buf)
        .chain([Path::new(env!("CARGO_MANIFEST_DIR")).join("..")]);
    find_default_model(roots)
}

/// The first of `roots` that holds [`DEFAULT_MODEL`], or a message naming where it looked.
fn find_default_model(roots: impl Iterator<Item = PathBuf>) -> Result<PathBuf, String> {
    let mut looked = Vec::new();
    for root in roots {
        let candidate = root.join(DEFAULT_MODEL);
        if candidate.is_file() {
            return Ok(candidate);
        }
        looked.push(root.display().to_string());
    }
    Err(format!(
        "no --model given, and the shipped model {DEFAULT_MODEL} is in none of the folders \
         above this binary nor in the repository it was built from ({}): give --model FILE",
        looked.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_too_large_for_a_word_are_the_largest_not_refused() {
        assert_eq!(parse_top_k("18446744073709551615"), Ok(u32::MAX));
        assert_eq!(parse_top_k("99999999999999999999999999"), Ok(u32::MAX));
        assert_eq!(parse_top_k("7"), Ok(7));
        for bad in ["0", "-1", "", "1.5", "k"] {
            assert!(parse_top_k(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_at_most("123456789012345678901234567890"),
            Ok(usize::MAX)
        );
        assert_eq!(parse_at_most("0"), Ok(0));
        assert!(parse_at_most("-3").is_err());
    }

    #[test]
    fn the_default_model_is_found_from_the_binary_or_explained() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let found = default_model().expect("the repository's model");
        assert!(found.ends_with(DEFAULT_MODEL) && found.is_file());
        let elsewhere = std::env::temp_dir();
        let e = find_default_model([elsewhere.clone()].into_iter()).unwrap_err();
        assert!(
            e.contains(DEFAULT_MODEL) && e.contains("give --model"),
            "{e}"
        );
        assert!(e.contains(&elsewhere.display().to_string()), "{e}");
        let found = find_default_model([elsewhere, repo.clone()].into_iter()).unwrap();
        assert_eq!(found, repo.join(DEFAULT_MODEL));
    }
}
