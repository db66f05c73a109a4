// The uniform block of train_rmsnorm.wgsl and train_rmsnorm_bwd.wgsl (one layout).
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    acc: u32,
    groups: u32,
}
