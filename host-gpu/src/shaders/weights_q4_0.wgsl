// Weight access for Q4_0 matrices: ggml blocks of 18 bytes (f16 scale d, 16 bytes of nibbles);
// byte j holds weight j in its low nibble and weight j + 16 in its high one; weight = d · (q − 8).
@group(0) @binding(0) var<storage, read> w: array<u32>;

fn w_byte(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn load_w(row: u32, col: u32, cols: u32) -> f32 {
    let base = (row * (cols / 32u) + col / 32u) * 18u;
    let d = f16_bits_to_f32(w_byte(base) | (w_byte(base + 1u) << 8u));
    let j = col % 32u;
    let byte = w_byte(base + 2u + j % 16u);
    let q = select(byte & 0xfu, byte >> 4u, j >= 16u);
    return d * f32(i32(q) - 8);
}
