// Weight access for F32 matrices: w holds the f32 bits, row-major [rows][cols].
@group(0) @binding(0) var<storage, read> w: array<u32>;

fn load_w(row: u32, col: u32, cols: u32) -> f32 {
    return bitcast<f32>(w[row * cols + col]);
}
