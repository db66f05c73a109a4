#!/usr/bin/env python3
"""Checks a loglinear GGUF model file with gguf-py, ggml's reference Python reader.

    python3 tests/gguf_py_check.py MODEL.gguf [CHECKPOINT_DIR]

Needs `pip install gguf numpy safetensors`. Checks, failing (exit 1) on any mismatch:

* the file opens with `gguf.GGUFReader`; tensor data offsets are multiples of 32 and do not
  overlap;
* every metadata key listed in docs/model-file.md is present with the documented type, and the
  values agree with each other and with the tensor shapes (vocab, width, heads, λ levels, ...);
* every tensor name is one of the documented names, has the documented rank, one of the types
  F32/F16/Q8_0/Q4_0, and the recurrence-critical tensors are F32;
* every tensor dequantizes (`gguf.quants.dequantize`) to finite values.

With CHECKPOINT_DIR (config.json + model.safetensors, official key names) it also maps every
checkpoint key to its GGUF name (the table in docs/model-file.md) and compares:

* F32: bit-identical;  F16: bit-identical to numpy's round-to-nearest-even f16 of the weights;
* Q8_0/Q4_0: the blocks are byte-identical to an independent numpy port of ggml's reference
  quantizers (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`) below, gguf-py's own quantizer is
  reported alongside, and the dequantized error of every weight is within half a quantization
  step (Q8_0) or one step (Q4_0) of its block, plus the f16 rounding of the scale.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFReader
    from gguf import GGUFValueType as VT
except ImportError:  # pragma: no cover
    sys.exit("gguf_py_check: needs the gguf package (pip install gguf)")

DOC = Path(__file__).resolve().parent.parent / "docs" / "model-file.md"
# Metadata keys that only a BPE (`tokenizer.ggml.model` = gpt2) file has.
GPT2_ONLY_KEYS = {"tokenizer.ggml.merges"}
# Optional wherever they apply: a BPE tokenizer need not name a bos or an eos token.
OPTIONAL_KEYS = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}
ALIGNMENT = 32
QK = 32
ARCHES = {"loglinear_gdn", "loglinear_mamba2", "gated_deltanet", "mamba2"}
SUPPORTED = {QT.F32, QT.F16, QT.Q8_0, QT.Q4_0}

# Documented type words -> (GGUF type, array element type or None).
TYPE_WORDS = {
    "string": (VT.STRING, None),
    "u32": (VT.UINT32, None),
    "f32": (VT.FLOAT32, None),
    "bool": (VT.BOOL, None),
    "string array": (VT.ARRAY, VT.STRING),
    "i32 array": (VT.ARRAY, VT.INT32),
}

# Checkpoint key (relative to the model prefix / `layers.{i}.`) -> GGUF name, per family.
MAMBA2_MODEL = {
    "backbone.embeddings.weight": "token_embd.weight",
    "backbone.embedding.weight": "token_embd.weight",
    "backbone.norm_f.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
MAMBA2_BLOCK = {
    "mixer_norm.weight": "attn_norm.weight",
    "mlp_norm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mixer.A_log": "ssm_a_log",
    "mixer.dt_bias": "ssm_dt.bias",
    "mixer.L": "ssm_lambda_scale",
    "mixer.norm.weight": "ssm_norm.weight",
    "mixer.out_proj.weight": "ssm_out.weight",
    "mixer.in_proj.weight": "ssm_in.weight",
    "mixer.conv1d.weight": "ssm_conv1d.weight",
    "mixer.conv1d.bias": "ssm_conv1d.bias",
    "mixer.D": "ssm_d",
}
GDN_MODEL = {
    "model.embeddings.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
GDN_BLOCK = {
    "attn_norm.weight": "attn_norm.weight",
    "mlp_norm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "attn.A_log": "ssm_a_log",
    "attn.dt_bias": "ssm_dt.bias",
    "attn.L": "ssm_lambda_scale",
    "attn.o_norm.weight": "ssm_norm.weight",
    "attn.o_proj.weight": "ssm_out.weight",
    "attn.q_proj.weight": "attn_q.weight",
    "attn.k_proj.weight": "attn_k.weight",
    "attn.v_proj.weight": "attn_v.weight",
    "attn.g_proj.weight": "attn_gate.weight",
    "attn.a_proj.weight": "ssm_a_proj.weight",
    "attn.b_proj.weight": "ssm_beta.weight",
    "attn.l_proj.weight": "ssm_lambda.weight",
    "attn.q_conv1d.weight": "ssm_conv1d_q.weight",
    "attn.k_conv1d.weight": "ssm_conv1d_k.weight",
    "attn.v_conv1d.weight": "ssm_conv1d_v.weight",
}
MAMBA2_TYPES = {"hattention", "log_linear_mamba2", "mamba2mlp", "mamba2"}
GDN_TYPES = {"h_gated_deltanet", "gated_deltanet"}

VECTORS = {
    "output_norm.weight", "attn_norm.weight", "ffn_norm.weight", "ssm_a_log", "ssm_dt.bias",
    "ssm_norm.weight", "ssm_conv1d.bias", "ssm_d",
}
CRITICAL = VECTORS | {
    "ssm_lambda_scale", "ssm_conv1d.weight", "ssm_conv1d_q.weight", "ssm_conv1d_k.weight",
    "ssm_conv1d_v.weight",
}
MODEL_LEVEL = {"token_embd.weight", "output_norm.weight", "output.weight"}
BLOCK_NAMES = set(MAMBA2_BLOCK.values()) | set(GDN_BLOCK.values())


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.checks = 0

    def check(self, ok: bool, what: str) -> bool:
        self.checks += 1
        if not ok:
            self.failures.append(what)
            print(f"FAIL: {what}")
        return ok


def doc_metadata_keys() -> list[tuple[str, str]]:
    """(key, type word) rows of the Metadata table of docs/model-file.md."""
    rows = []
    in_table = False
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            in_table = line.strip() == "## Metadata"
            continue
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if in_table and m:
            rows.append((m.group(1), m.group(2)))
    return rows


def field_value(field):
    """A metadata field's value as Python data."""
    if hasattr(field, "contents"):
        return field.contents()
    if field.types[0] == VT.STRING:  # older gguf-py
        return bytes(field.parts[-1]).decode()
    if field.types[0] == VT.ARRAY:
        if field.types[-1] == VT.STRING:
            return [bytes(field.parts[i]).decode() for i in field.data]
        return [field.parts[i][0].item() for i in field.data]
    return field.parts[-1][0].item()


def base_name(name: str) -> tuple[int | None, str]:
    m = re.match(r"^blk\.(0|[1-9][0-9]*)\.(.+)$", name)
    if m:
        return int(m.group(1)), m.group(2)
    return None, name


# ---- ggml's reference quantizers, re-implemented in numpy (ggml-quants.c) -------------------

def roundf(x: np.ndarray) -> np.ndarray:
    """C roundf (half away from zero) of float32 values, exactly (in float64)."""
    x = x.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d); returns (blocks, 34) bytes."""
    b = x.astype(np.float32).reshape(-1, QK)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = roundf((b * idv[:, None]).astype(np.float32)).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """quantize_row_q4_0_ref: the signed value of largest magnitude (first one) maps to -8,
    d = max/-8, q = min(15, (int8)(x/d + 8.5)); byte j = q[j] | q[j+16] << 4."""
    b = x.astype(np.float32).reshape(-1, QK)
    idx = np.abs(b).argmax(axis=1)
    mx = b[np.arange(b.shape[0]), idx]
    d = (mx / np.float32(-8.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = ((b * idv[:, None]).astype(np.float32) + np.float32(8.5)).astype(np.float32)
    q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out


def block_scales(raw: np.ndarray, block_bytes: int) -> np.ndarray:
    blocks = raw.reshape(-1, block_bytes)
    return np.abs(blocks[:, :2].copy().view(np.float16).astype(np.float64)[:, 0])


# ---- checks ---------------------------------------------------------------------------------

def check_metadata(c: Checker, reader: GGUFReader) -> dict:
    fields = reader.fields
    meta = {}
    arch_field = fields.get("general.architecture")
    if not c.check(arch_field is not None, "general.architecture is missing"):
        return meta
    arch = field_value(arch_field)
    c.check(arch in ARCHES, f"general.architecture `{arch}` is not one of {sorted(ARCHES)}")
    doc_keys = doc_metadata_keys()
    c.check(len(doc_keys) >= 20, f"read only {len(doc_keys)} metadata keys from {DOC}")
    for key, word in doc_keys:
        key = key.replace("{arch}", arch)
        want = TYPE_WORDS.get(word)
        if not c.check(want is not None, f"docs: unknown type `{word}` for `{key}`"):
            continue
        f = fields.get(key)
        # Keys of the BPE tokenizer only (docs/model-file.md: "`gpt2` only") may be absent.
        tok_model = fields.get("tokenizer.ggml.model")
        if f is None and key in GPT2_ONLY_KEYS and field_value(tok_model) != "gpt2":
            continue
        # Keys the docs call optional (the bos/eos ids a tokenizer may not name).
        if f is None and key in OPTIONAL_KEYS:
            continue
        if not c.check(f is not None, f"metadata `{key}` is missing"):
            continue
        main, sub = want
        c.check(f.types[0] == main, f"metadata `{key}` has type {f.types[0].name}, expected {main.name}")
        if sub is not None:
            c.check(f.types[-1] == sub, f"metadata `{key}` has elements {f.types[-1].name}, expected {sub.name}")
        meta[key.removeprefix(arch + ".")] = field_value(f)
    meta["arch"] = arch
    c.check(meta.get("general.alignment") == ALIGNMENT, f"general.alignment is {meta.get('general.alignment')}, expected 32")
    c.check(reader.alignment == ALIGNMENT, f"gguf-py read alignment {reader.alignment}")
    ll = arch.startswith("loglinear_")
    c.check(meta.get("lambda_levels") == (15 if ll else 0), f"lambda_levels {meta.get('lambda_levels')} for {arch}")
    c.check(meta.get("state_levels") == (15 if ll else 1), f"state_levels {meta.get('state_levels')} for {arch}")
    c.check(meta.get("capacity_policy") == "saturate_top_level", f"capacity_policy {meta.get('capacity_policy')!r}")
    tok_model = meta.get("tokenizer.ggml.model")
    toks = meta.get("tokenizer.ggml.tokens")
    tt = meta.get("tokenizer.ggml.token_type")
    if tok_model == "gpt2":
        # BPE from a tokenizer.json: one token per embedding row, ggml token types.
        c.check(toks is not None and len(toks) == meta.get("vocab_size"), "tokenizer.ggml.tokens does not cover the vocabulary")
        c.check(tt is not None and len(tt) == len(toks or []) and set(tt) <= {1, 3, 5}, "tokenizer.ggml.token_type")
        merges = meta.get("tokenizer.ggml.merges")
        c.check(merges is not None and all(len(m.split(" ")) == 2 for m in merges), "tokenizer.ggml.merges")
    else:
        c.check(tok_model == "bytes", f"tokenizer.ggml.model {tok_model!r}")
        c.check(toks == [f"<0x{b:02X}>" for b in range(256)], "tokenizer.ggml.tokens is not <0x00>..<0xFF>")
        c.check(tt is not None and list(tt) == [6] * 256, "tokenizer.ggml.token_type is not 256 x 6")
        c.check(meta.get("vocab_size") == 256, f"vocab_size {meta.get('vocab_size')} with a byte tokenizer")
    eps = meta.get("norm_epsilon")
    c.check(eps is not None and 0 < eps < 1e-2, f"norm_epsilon {eps}")
    return meta


def check_layout(c: Checker, reader: GGUFReader, path: Path) -> None:
    size = path.stat().st_size
    c.check(reader.data_offset % ALIGNMENT == 0, f"data section starts at {reader.data_offset}, not a multiple of 32")
    spans = sorted((t.data_offset, t.data_offset + t.n_bytes, t.name) for t in reader.tensors)
    for t in reader.tensors:
        c.check((t.data_offset - reader.data_offset) % ALIGNMENT == 0, f"tensor `{t.name}` offset not aligned")
    for (s0, e0, n0), (s1, _, n1) in zip(spans, spans[1:]):
        c.check(e0 <= s1, f"tensors `{n0}` and `{n1}` overlap")
    if spans:
        c.check(spans[-1][1] <= size, f"tensor `{spans[-1][2]}` runs past the end of the file")


def expected_ne(shape: tuple[int, ...], vector: bool) -> list[int]:
    """ggml dims of a checkpoint tensor: [n] for vectors, [cols, rows] otherwise."""
    if vector:
        return [int(np.prod(shape))]
    rows = shape[0]
    cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return [cols, rows]


def check_tensors(c: Checker, reader: GGUFReader, meta: dict) -> dict:
    """Names, ranks, types, finiteness, consistency with the metadata. Returns name -> tensor."""
    by_name = {}
    arch = meta.get("arch", "")
    mamba = arch in ("loglinear_mamba2", "mamba2")
    ll = arch.startswith("loglinear_")
    blocks = set()
    for t in reader.tensors:
        by_name[t.name] = t
        layer, base = base_name(t.name)
        known = base in MODEL_LEVEL if layer is None else base in BLOCK_NAMES
        c.check(known, f"tensor `{t.name}` is not a documented name")
        if layer is not None:
            blocks.add(layer)
        c.check(t.tensor_type in SUPPORTED, f"tensor `{t.name}` has type {t.tensor_type.name}")
        rank = len(t.shape)
        want_rank = 1 if base in VECTORS else 2
        c.check(rank == want_rank, f"tensor `{t.name}` has {rank} dims, expected {want_rank}")
        if base in CRITICAL:
            c.check(t.tensor_type == QT.F32, f"tensor `{t.name}` is recurrence-critical but {t.tensor_type.name}")
        try:
            deq = gguf.quants.dequantize(t.data, t.tensor_type)
            c.check(deq.size == t.n_elements, f"tensor `{t.name}` dequantizes to {deq.size} values, not {t.n_elements}")
            c.check(bool(np.isfinite(deq).all()), f"tensor `{t.name}` has non-finite values")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"tensor `{t.name}` does not dequantize: {e}")

    def ne(name):
        t = by_name.get(name)
        return [int(x) for x in t.shape] if t is not None else None

    n_layers = meta.get("block_count")
    c.check(blocks == set(range(n_layers or 0)), f"block indices {sorted(blocks)} vs block_count {n_layers}")
    V, D, F, H = (meta.get(k) for k in ("vocab_size", "embedding_length", "feed_forward_length", "head_count"))
    dk, dv, G, W = (meta.get(k) for k in ("head_k_dim", "head_v_dim", "group_count", "conv_kernel"))
    L = meta.get("lambda_levels")
    want = {
        "token_embd.weight": [D, V], "output.weight": [D, V], "output_norm.weight": [D],
    }
    blk = {
        "attn_norm.weight": [D], "ffn_norm.weight": [D], "ffn_gate.weight": [D, F],
        "ffn_up.weight": [D, F], "ffn_down.weight": [F, D], "ssm_a_log": [H], "ssm_dt.bias": [H],
    }
    if ll:
        blk["ssm_lambda_scale"] = [L, H]
    if mamba:
        d_inner = H * dv
        conv = d_inner + 2 * G * dk
        blk.update({
            "ssm_in.weight": [D, d_inner + conv + H + H * L], "ssm_conv1d.weight": [W, conv],
            "ssm_d": [H], "ssm_norm.weight": [d_inner], "ssm_out.weight": [d_inner, D],
        })
        c.check(d_inner % meta.get("norm_group_size", 0) == 0 if meta.get("norm_group_size") else False,
                "norm_group_size does not divide d_inner")
        if meta.get("conv_bias"):
            blk["ssm_conv1d.bias"] = [conv]
    else:
        kd, vd = H * dk, H * dv
        c.check(G == H, f"group_count {G} != head_count {H} for GDN")
        c.check(meta.get("norm_group_size") == dv, "norm_group_size != head_v_dim for GDN")
        c.check(meta.get("conv_bias") is False, "GDN has no conv bias")
        blk.update({
            "attn_q.weight": [D, kd], "attn_k.weight": [D, kd], "attn_v.weight": [D, vd],
            "attn_gate.weight": [D, vd], "ssm_a_proj.weight": [D, H], "ssm_beta.weight": [D, H],
            "ssm_conv1d_q.weight": [W, kd], "ssm_conv1d_k.weight": [W, kd],
            "ssm_conv1d_v.weight": [W, vd], "ssm_norm.weight": [dv], "ssm_out.weight": [vd, D],
        })
        if ll:
            blk["ssm_lambda.weight"] = [D, H * L]
    for i in range(n_layers or 0):
        for k, v in blk.items():
            want[f"blk.{i}.{k}"] = v
    for name, dims in want.items():
        got = ne(name)
        c.check(got == dims, f"tensor `{name}`: ggml dims {got}, metadata implies {dims}")
    extra = sorted(set(by_name) - set(want))
    c.check(not extra, f"tensors the metadata does not call for: {extra}")
    return by_name


def load_checkpoint(ckpt: Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    text = (ckpt / "config.json").read_text()
    config = json.loads(text)  # Python's json reads the official bare `Infinity`
    weights = load_file(str(ckpt / "model.safetensors"))
    return config, weights


def gguf_name_of(key: str, model_type: str) -> str | None:
    if model_type in MAMBA2_TYPES:
        model, block, prefix = MAMBA2_MODEL, MAMBA2_BLOCK, "backbone.layers."
    elif model_type in GDN_TYPES:
        model, block, prefix = GDN_MODEL, GDN_BLOCK, "model.layers."
    else:
        return None
    if key in model:
        return model[key]
    if key.startswith(prefix):
        idx, _, rel = key[len(prefix):].partition(".")
        if idx.isdigit() and rel in block:
            return f"blk.{int(idx)}.{block[rel]}"
    return None


def compare_checkpoint(c: Checker, by_name: dict, meta: dict, ckpt: Path, stats: dict) -> None:
    config, weights = load_checkpoint(ckpt)
    mt = config.get("model_type", "")
    c.check(mt in MAMBA2_TYPES | GDN_TYPES, f"config.json model_type `{mt}` unknown")
    eps = config.get("norm_eps", config.get("layer_norm_epsilon"))
    if eps is not None:
        c.check(meta.get("norm_epsilon") == np.float32(eps), f"norm_epsilon {meta.get('norm_epsilon')} vs config {eps}")
    for k, m in (("vocab_size", "vocab_size"), ("hidden_size", "embedding_length"),
                 ("num_hidden_layers", "block_count"), ("num_heads", "head_count")):
        if k in config:
            c.check(meta.get(m) == config[k], f"{m} {meta.get(m)} vs config.json {k} {config[k]}")
    seen = set()
    for key, w in weights.items():
        name = gguf_name_of(key, mt)
        if not c.check(name is not None, f"checkpoint key `{key}` has no GGUF name"):
            continue
        t = by_name.get(name)
        if not c.check(t is not None, f"checkpoint key `{key}`: tensor `{name}` missing from the file"):
            continue
        seen.add(name)
        _, base = base_name(name)
        ref = w.astype(np.float32)
        want_ne = expected_ne(w.shape, base in VECTORS)
        got_ne = [int(x) for x in t.shape]
        if not c.check(got_ne == want_ne, f"tensor `{name}` ({key} {list(w.shape)}): ggml dims {got_ne}, expected {want_ne}"):
            continue
        cols = want_ne[0]
        flat = ref.reshape(-1)
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float32)
        raw = np.asarray(t.data).reshape(-1)
        qt = t.tensor_type
        stats.setdefault(qt.name, [0, 0])
        stats[qt.name][0] += 1
        stats[qt.name][1] += flat.size
        if qt == QT.F32:
            c.check(np.array_equal(deq.view(np.uint32), flat.view(np.uint32)), f"tensor `{name}`: F32 data differs from `{key}`")
        elif qt == QT.F16:
            want = flat.astype(np.float16)
            c.check(np.array_equal(raw.view(np.uint16), want.view(np.uint16)), f"tensor `{name}`: F16 data is not the f16 rounding of `{key}`")
            ulp = np.spacing(np.abs(want)).astype(np.float32)  # upward: covers binade edges
            c.check(bool((np.abs(deq - flat) <= 0.5 * ulp + 1e-30).all()), f"tensor `{name}`: F16 error above half an ulp")
        elif qt in (QT.Q8_0, QT.Q4_0):
            c.check(cols % QK == 0, f"tensor `{name}`: {qt.name} rows of {cols}")
            q8 = qt == QT.Q8_0
            nbytes = 34 if q8 else 18
            mine = (quantize_q8_0 if q8 else quantize_q4_0)(flat).reshape(-1)
            raw_u8 = raw.view(np.uint8)
            same = np.array_equal(raw_u8, mine)
            if not same:
                nb = (raw_u8.reshape(-1, nbytes) != mine.reshape(-1, nbytes)).any(axis=1).sum()
                c.check(False, f"tensor `{name}`: {nb} of {flat.size // QK} {qt.name} blocks differ from the numpy port of ggml's reference quantizer")
            else:
                c.checks += 1
            try:
                theirs = np.asarray(gguf.quants.quantize(ref.reshape(-1, cols), qt)).reshape(-1)
                stats.setdefault("gguf-py quantizer", [0, 0])
                stats["gguf-py quantizer"][0] += 1
                stats["gguf-py quantizer"][1] += int(np.array_equal(theirs, raw_u8))
            except Exception as e:  # noqa: BLE001
                print(f"note: gguf-py cannot quantize `{name}`: {e}")
            step = np.repeat(block_scales(raw_u8, nbytes), QK)
            err = np.abs(deq.astype(np.float64) - flat.astype(np.float64))
            # Half a step (Q8_0) or one step (Q4_0) of the exact scale, plus what rounding the
            # scale to f16 can add (|q| <= 127 or 8 times a relative 2^-11).
            bound = step * ((0.5 + 127 * 2.0**-11) if q8 else (1.0 + 8 * 2.0**-11)) + 1e-12
            worst = float((err / np.maximum(step, 1e-30)).max()) if err.size else 0.0
            key_stat = f"{qt.name} max error / step"
            stats[key_stat] = max(stats.get(key_stat, 0.0), worst)
            c.check(bool((err <= bound).all()), f"tensor `{name}`: {qt.name} error {err.max():.3g} above the bound (worst {worst:.3f} steps)")
        else:
            c.check(False, f"tensor `{name}`: unexpected type {qt.name}")
    missing = sorted(set(by_name) - seen)
    c.check(not missing, f"file tensors with no checkpoint counterpart: {missing}")


def gguf_version() -> str:
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:  # noqa: BLE001
        return "?"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__)
        return 2
    path = Path(argv[1])
    c = Checker()
    try:
        reader = GGUFReader(path)
    except Exception as e:  # noqa: BLE001
        print(f"FAIL: gguf-py cannot open {path}: {e}")
        return 1
    meta = check_metadata(c, reader)
    check_layout(c, reader, path)
    by_name = check_tensors(c, reader, meta)
    stats: dict = {}
    if len(argv) == 3:
        compare_checkpoint(c, by_name, meta, Path(argv[2]), stats)
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print(f"{path}: gguf-py {gguf_version()}, {meta.get('arch')}, "
          f"{len(reader.fields)} metadata keys, {len(reader.tensors)} tensors {types}")
    for k, v in stats.items():
        if isinstance(v, list) and k == "gguf-py quantizer":
            print(f"  gguf-py's own quantizer gives identical bytes for {v[1]}/{v[0]} quantized tensors")
        elif isinstance(v, list):
            print(f"  {k}: {v[0]} tensors, {v[1]} weights compared with the checkpoint")
        else:
            print(f"  {k}: {v:.3f}")
    print(f"{c.checks - len(c.failures)} passed, {len(c.failures)} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
