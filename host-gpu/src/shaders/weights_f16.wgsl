// Weight access for F16 matrices: two halves per word, element e in word e/2 (low half first).
@group(0) @binding(0) var<storage, read> w: array<u32>;

fn load_w(row: u32, col: u32, cols: u32) -> f32 {
    let e = row * cols + col;
    return f16_bits_to_f32(w[e >> 1u] >> ((e & 1u) * 16u));
}
