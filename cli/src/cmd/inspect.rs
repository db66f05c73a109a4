//! `loglinear inspect`: a GGUF file's metadata, tensors, types, sizes and bits per weight, and
//! whether the runtime would load it.

use super::table::{human_bytes, print_tensor_table, Row};
use crate::{CliError, ModelArg, Res};
use loglinear_converter::command_paths::{CommandPaths, Reads};
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf, LoadError};
use loglinear_runtime::gguf::format::{self, ValueType};
use loglinear_runtime::gguf::{GgufFile, MetaArray, MetaValue};
use loglinear_runtime::ModelConfig;
use serde_json::{json, Value};

/// `loglinear inspect`'s arguments.
#[derive(clap::Args)]
#[command(mut_arg("flag", |a| a.help("GGUF file to show, e.g. models/ll-gdn-mcu-q8_0.gguf")))]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Print one JSON object instead of text: file, metadata (values as JSON numbers,
    /// strings and arrays), tensors, and the runtime's verdict.
    #[arg(long)]
    pub json: bool,
}

impl InspectArgs {
    /// What `inspect` reads.
    pub(crate) fn paths(&self) -> CommandPaths {
        let m = &self.model;
        CommandPaths::new().reads(m.flag(), Some(m.path()), Reads::File)
    }
}

fn meta_type(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::Array(a) => format!(
            "[{}; {}]",
            ValueType::from_id(a.elem_type).map_or("?", ValueType::name),
            a.len
        ),
        v => v.value_type().name().into(),
    }
}

fn meta_text(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::F32(x) => format!("{x:e}"),
        MetaValue::Bool(x) => x.to_string(),
        MetaValue::Str(s) => quoted(s),
        MetaValue::Array(a) => array_text(a),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F64(x) => format!("{x:e}"),
    }
}

/// A metadata string in double quotes, with quotes, backslashes and control characters
/// escaped as JSON writes them, so that it reads on one line.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn array_text(a: &MetaArray<'_>) -> String {
    const SHOW: usize = 6;
    let items: Vec<String> = a.iter().take(SHOW).map(|v| meta_text(&v)).collect();
    let more = if a.len as usize > SHOW { ", …" } else { "" };
    format!("[{}{more}]", items.join(", "))
}

/// A metadata value as JSON: integers and floats as numbers, arrays in full.
fn meta_json(v: &MetaValue<'_>) -> Value {
    match v {
        MetaValue::U8(x) => json!(x),
        MetaValue::I8(x) => json!(x),
        MetaValue::U16(x) => json!(x),
        MetaValue::I16(x) => json!(x),
        MetaValue::U32(x) => json!(x),
        MetaValue::I32(x) => json!(x),
        MetaValue::F32(x) => json!(x),
        MetaValue::Bool(x) => json!(x),
        MetaValue::Str(s) => json!(s),
        MetaValue::Array(a) => Value::Array(a.iter().map(|v| meta_json(&v)).collect()),
        MetaValue::U64(x) => json!(x),
        MetaValue::I64(x) => json!(x),
        MetaValue::F64(x) => json!(x),
    }
}

/// Whether the runtime loads the file, through the same checks as every command that runs a
/// model (its finiteness check included): its config, or why not.
fn verdict(path: &std::path::Path, bytes: &AlignedBytes) -> Result<ModelConfig, String> {
    let file = IndexedGguf::parse(bytes.as_bytes()).map_err(|e| e.to_string())?;
    match file.refuse_non_finite(path) {
        Ok(()) => Ok(*file.config()),
        Err(LoadError::NonFinite { tensor, index, .. }) => Err(format!(
            "tensor {tensor} holds a NaN or an infinity (element {index})"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `loglinear inspect`.
pub(crate) fn run(args: &InspectArgs) -> Res {
    let path = args.model.path();
    let bytes = AlignedBytes::read(path)?;
    let file = GgufFile::parse(bytes.as_bytes()).map_err(|error| CliError::Gguf {
        path: path.to_path_buf(),
        error,
    })?;
    let verdict = verdict(path, &bytes);
    let refused = |e: &dyn std::fmt::Display| -> Box<dyn std::error::Error> {
        format!(
            "{}: the runtime would refuse this file: {e}",
            path.display()
        )
        .into()
    };
    if args.json {
        let tensors: Vec<Value> = file
            .tensors()
            .map(|t| {
                json!({
                    "name": t.name,
                    "dims": &t.dims[..t.n_dims as usize],
                    "type": t.dtype.name(),
                    "elements": t.len(),
                    "bytes": t.data.len(),
                    "offset": t.offset,
                })
            })
            .collect();
        let metadata: serde_json::Map<String, Value> = file
            .metadata()
            .map(|(k, v)| (k.to_string(), meta_json(&v)))
            .collect();
        let model = match &verdict {
            Ok(c) => json!({
                "loads": true,
                "arch": c.arch.name(),
                "blocks": c.num_layers,
                "width": c.hidden_size,
                "heads": c.num_heads,
                "head_k_dim": c.head_k_dim,
                "head_v_dim": c.head_v_dim,
                "vocab": c.vocab_size,
            }),
            Err(e) => json!({ "loads": false, "refused": e.to_string() }),
        };
        outln!(
            "{:#}",
            json!({
                "file": path.display().to_string(),
                "bytes": bytes.as_bytes().len(),
                "gguf_version": 3,
                "alignment": file.alignment(),
                "metadata": metadata,
                "tensors": tensors,
                "model": model,
            })
        );
        return verdict.map(|_| ()).map_err(|e| refused(&e));
    }
    outln!(
        "{}: GGUF v3, {} bytes ({}), alignment {}, {} metadata keys, {} tensors",
        path.display(),
        bytes.as_bytes().len(),
        human_bytes(bytes.as_bytes().len()),
        file.alignment(),
        file.metadata_len(),
        file.tensor_count()
    );
    outln!("\nmetadata:");
    let kw = file.metadata().map(|(k, _)| k.len()).max().unwrap_or(3);
    for (k, v) in file.metadata() {
        outln!("  {k:<kw$}  {:<14}  {}", meta_type(&v), meta_text(&v));
    }
    outln!("\ntensors:");
    let rows: Vec<Row> = file
        .tensors()
        .map(|t| {
            let dims = &t.dims[..t.n_dims as usize];
            Row {
                name: t.name.to_string(),
                shape: format!(
                    "[{}]",
                    dims.iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                dtype: t.dtype,
                elements: t.len(),
                bytes: t.data.len(),
                note: format!("@{}", t.offset),
            }
        })
        .collect();
    print_tensor_table(&rows, "ggml dims")?;
    match verdict {
        Ok(c) => {
            outln!(
                "\nmodel: ok: {} ({}), {} blocks, width {}, {} heads ({}x{}), vocab {}",
                c.arch.name(),
                file.get(format::general::NAME)
                    .and_then(|v| v.as_str())
                    .unwrap_or("unnamed"),
                c.num_layers,
                c.hidden_size,
                c.num_heads,
                c.head_k_dim,
                c.head_v_dim,
                c.vocab_size
            );
        }
        // The listing above is still printed: it helps to see what the file holds.
        Err(e) => return Err(refused(&e)),
    }
    Ok(())
}
