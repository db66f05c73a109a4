// One AdamW step over one parameter tensor, with torch.optim.AdamW's maths (decoupled weight
// decay, bias-corrected moments):
//   g  = grad · clip_factor                   (global-norm clipping, from train_grad_norm)
//   p  = p · decay_factor                     (1 − lr·wd where decay applies, else 1)
//   m  = m + (1 − β1)(g − m)
//   v  = β2·v + (1 − β2)·g²
//   p  = p − step_size · m / (√v / bc2_sqrt + ε)
// with step_size = lr / (1 − β1^t) and bc2_sqrt = √(1 − β2^t) computed on the CPU in f64.
// Workgroups are laid out on a 2-D grid for tensors over 65535·256 values.

struct AdamParams {
    len: u32,
    decay_factor: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> value: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read> clip: array<f32>;
@group(0) @binding(5) var<uniform> ap: AdamParams;

@compute @workgroup_size(256)
fn adamw(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= ap.len) {
        return;
    }
    let g = grad[i] * clip[1];
    let p = value[i] * ap.decay_factor;
    let m1 = m[i] + (1.0 - ap.beta1) * (g - m[i]);
    let v1 = ap.beta2 * v[i] + (1.0 - ap.beta2) * g * g;
    m[i] = m1;
    v[i] = v1;
    value[i] = p - ap.step_size * m1 / (sqrt(v1) / ap.bc2_sqrt + ap.eps);
}
