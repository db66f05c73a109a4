// Inputs of the inter-chunk scan, Gated DeltaNet form: q̃, K̃, W̃ and U precomputed by
// chunk_intra_gdn.wgsl; transition h ↦ e^Γ h − K̃ᵀ(W̃ h). The scan itself is chunk_scan_body.wgsl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> qt: array<f32>;
@group(0) @binding(2) var<storage, read> kt: array<f32>;
@group(0) @binding(3) var<storage, read> wt: array<f32>;
@group(0) @binding(4) var<storage, read> u: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> olvl: array<f32>;
@group(0) @binding(8) var<storage, read_write> hstate: array<f32>;

const GDN: bool = true;
const SB_LEN: u32 = 512u; // MAX_DK * BV / 4
const X_LEN: u32 = 128u;  // C * BV / 4

fn q_factor(g_row: f32) -> f32 {
    return 1.0;
}
fn k_factor(g_last: f32, g_row: f32) -> f32 {
    return 1.0;
}
fn qt_at(t: u32, h: u32, kk: u32) -> f32 {
    return qt[(t * P.heads + h) * P.dk + kk];
}
fn kt_at(t: u32, h: u32, kk: u32) -> f32 {
    return kt[(t * P.heads + h) * P.dk + kk];
}
fn wt_at(t: u32, h: u32, kk: u32) -> f32 {
    return wt[(t * P.heads + h) * P.dk + kk];
}
fn u_at(t: u32, h: u32, d: u32) -> f32 {
    return u[(t * P.heads + h) * P.dv + d];
}
