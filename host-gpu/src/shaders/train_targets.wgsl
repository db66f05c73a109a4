// Token windows and explicit inputs / targets, B rows each:
//   shift: targets[b·T + t] = windows[b·(T+1) + t + 1]   (the next-token targets of windows
//          [B][T+1])
//   pack:  windows[b·(T+1) + t] = inputs[b·T + t] for t < T, and 0 at t = T   (inputs [B][T]
//          into the window layout the embedding reads; the last slot is never read as input)
struct TargetParams {
    t: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: TargetParams;

@compute @workgroup_size(256)
fn shift(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.batch) {
        return;
    }
    let b = i / p.t;
    let t = i % p.t;
    dst[i] = src[b * (p.t + 1u) + t + 1u];
}

@compute @workgroup_size(256)
fn pack(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    let w = p.t + 1u;
    if (i >= w * p.batch) {
        return;
    }
    let b = i / w;
    let t = i % w;
    if (t < p.t) {
        dst[i] = src[b * p.t + t];
    } else {
        dst[i] = 0u;
    }
}
