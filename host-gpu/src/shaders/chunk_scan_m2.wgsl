// Inputs of the inter-chunk scan, Mamba-2 form: q̃_i = e^{γ_i} q_i, K̃_j = e^{Γ−γ_j} k_j, U = V,
// transition h ↦ e^Γ h (no W̃ term). The scan itself is chunk_scan_body.wgsl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> lam: array<f32>;
@group(0) @binding(6) var<storage, read_write> olvl: array<f32>;
@group(0) @binding(7) var<storage, read_write> hstate: array<f32>;

const GDN: bool = false;
const SB_LEN: u32 = 1u; // no collecting-state copy, no W̃ products
const X_LEN: u32 = 1u;

// Per-row factors of q̃ and K̃ (the body fills fq, fk once per chunk).
fn q_factor(g_row: f32) -> f32 {
    return exp(g_row);
}
fn k_factor(g_last: f32, g_row: f32) -> f32 {
    return exp(g_last - g_row);
}
fn qt_at(t: u32, h: u32, kk: u32) -> f32 {
    return q[qk_row(t, h) + kk];
}
fn kt_at(t: u32, h: u32, kk: u32) -> f32 {
    return k[qk_row(t, h) + kk];
}
fn wt_at(t: u32, h: u32, kk: u32) -> f32 {
    return 0.0;
}
fn u_at(t: u32, h: u32, d: u32) -> f32 {
    return v[(t * P.heads + h) * P.dv + d];
}
