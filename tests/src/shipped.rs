//! The shipped models (`models/`) as regression subjects. An error bound measured on one of
//! them is checked on that model, loaded by name, and not applied to whatever golden set the
//! tests run on.

use crate::{get, gguf_as, models_dir, read_arrays, rel_max};
use loglinear_converter::Checkpoint;
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::quant::Activations;
use loglinear_runtime::{DType, Model, Session, SessionConfig};

/// The prompt a shipped model's expected outputs were recorded on
/// (`prompts/expected.safetensors`).
pub fn prompt_ids(model_name: &str) -> Vec<u32> {
    let exp = read_arrays(
        &models_dir()
            .join(model_name)
            .join("prompts/expected.safetensors"),
    );
    get(&exp, "prompt_ids", model_name).ids()
}

/// The logits at every position of stepping `ids` from an empty state.
pub fn all_logits(model: &Model<'_>, ids: &[u32]) -> Vec<f32> {
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(model, &mut arena, cfg).unwrap();
    let mut out = Vec::new();
    for &id in ids {
        out.extend_from_slice(s.step(id).unwrap());
    }
    out
}

/// How far the prompt logits of shipped model `model_name` move when its matrices are stored
/// as each of `dtypes` and run with `activations`: rel_max against its F32 checkpoint, over
/// every position of its prompt, in `dtypes` order. The checkpoint and its reference logits
/// are computed once for all types.
pub fn quantized_prompt_errors(
    model_name: &str,
    dtypes: &[DType],
    activations: Activations,
) -> Vec<f64> {
    let ckpt = Checkpoint::load(models_dir().join(model_name))
        .unwrap_or_else(|e| panic!("{model_name}: {e}"));
    let ids = prompt_ids(model_name);
    let reference: Vec<f64> = all_logits(&ckpt.model().unwrap(), &ids)
        .iter()
        .map(|&x| f64::from(x))
        .collect();
    dtypes
        .iter()
        .map(|&dtype| {
            let bytes = gguf_as(&ckpt, dtype);
            let file = GgufModel::parse(bytes.as_bytes()).unwrap();
            let model = file.model().unwrap().with_activations(activations);
            rel_max(&all_logits(&model, &ids), &reference)
        })
        .collect()
}
