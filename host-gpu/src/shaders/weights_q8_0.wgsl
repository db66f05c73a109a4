// Weight access for Q8_0 matrices: ggml blocks of 34 bytes (f16 scale d, 32 × i8 q), weight =
// d · q. Rows are whole blocks. 34 is not a multiple of 4, so bytes are addressed directly.
@group(0) @binding(0) var<storage, read> w: array<u32>;

fn w_byte(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn load_w(row: u32, col: u32, cols: u32) -> f32 {
    let base = (row * (cols / 32u) + col / 32u) * 34u;
    let d = f16_bits_to_f32(w_byte(base) | (w_byte(base + 1u) << 8u));
    let q = i32(w_byte(base + 2u + col % 32u));
    return d * f32(select(q, q - 256, q >= 128));
}
