//! What the `checkpoint_import` fuzz target runs, shared with its replay test
//! (`tests/tests/fuzz_replay_checkpoint_serial.rs`), which includes this file by path.
//!
//! The input is `config.json` and a safetensors header, split by a length prefix (see
//! [`split_input`]). Any input must give a checkpoint or a typed error, never a panic, an
//! out-of-bounds read, a hang or a huge allocation.

use loglinear_converter::Checkpoint;
use loglinear_runtime::{Session, SessionConfig};

/// Tensor data the exercise adds after a header, at most (zeros: values do not matter here).
const MAX_DATA: usize = 8 << 20;

/// Splits a fuzz input into `config.json` and safetensors bytes: a little-endian u32 length of
/// the config, the config, then the safetensors bytes (usually just the 8-byte header length
/// and the header JSON; [`with_tensor_data`] supplies the data).
pub fn split_input(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return (&[], data);
    };
    let n = (u32::from_le_bytes(*len) as usize).min(rest.len());
    rest.split_at(n)
}

/// Joins a config and safetensors bytes into one fuzz input (for seeds).
pub fn join_input(config: &[u8], safetensors: &[u8]) -> Vec<u8> {
    let mut v = (config.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(config);
    v.extend_from_slice(safetensors);
    v
}

/// The safetensors bytes with zeros appended up to the end of the last tensor the header
/// names (when that is at most [`MAX_DATA`] past what is there), so that the fuzzer can
/// mutate the header alone and still reach the importer behind the safetensors parser.
pub fn with_tensor_data(st: &[u8]) -> Vec<u8> {
    let mut out = st.to_vec();
    let Some((len, rest)) = st.split_first_chunk::<8>() else {
        return out;
    };
    let Ok(n) = usize::try_from(u64::from_le_bytes(*len)) else {
        return out;
    };
    let Some(header) = rest.get(..n) else {
        return out;
    };
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(header) else {
        return out;
    };
    let end = map
        .values()
        .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let want = (8 + n as u64).saturating_add(end);
    if want > out.len() as u64 && want - (out.len() as u64) <= MAX_DATA as u64 {
        out.resize(want as usize, 0);
    }
    out
}

/// Imports the input; on success also runs one step of a session on the imported model.
pub fn exercise_checkpoint_import(data: &[u8]) {
    let (config, st) = split_input(data);
    let st = with_tensor_data(st);
    let Ok(ckpt) = Checkpoint::from_bytes(config, &st) else {
        return;
    };
    let Ok(model) = ckpt.model() else { return };
    let cfg = SessionConfig::default();
    match Session::<f32>::arena_bytes(&model, &cfg) {
        Ok(n) if n <= 64 << 20 => {
            let mut arena = vec![0u8; n];
            if let Ok(mut s) = Session::<f32>::new(&model, &mut arena, cfg) {
                let _ = s.step(0);
            }
        }
        _ => {}
    }
}
