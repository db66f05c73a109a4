// The rows of the RMSNorm kernels (rmsnorm.wgsl, train_rmsnorm.wgsl, train_rmsnorm_bwd.wgsl):
// one 64-thread workgroup per row of `x`, `w` the norm weight.
const WG: u32 = 64u;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;

// The row of workgroup `wg` in a grid of `nw` (rows run over x, then y).
fn grid_row(wg: vec3<u32>, nw: vec3<u32>) -> u32 {
    return wg.y * nw.x + wg.x;
}
