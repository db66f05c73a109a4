// The bindings of the inference projection kernels (matmul.wgsl, matmul_coop.wgsl):
// Y = X·Wᵀ, W behind binding 0 (one weights_*.wgsl).
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    x_offset: u32, // first element of X
    x_stride: u32, // elements per X row
    y_offset: u32, // first element of Y
    y_stride: u32, // elements per Y row (Y may be a column slice of a wider buffer)
    _pad: u32,
}

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: MatmulParams;
