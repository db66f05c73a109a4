// GDN backward, step 2: the forward level states again, stored per chunk. One workgroup per
// (BV columns of dv, head, chunk level m), sequential over chunks (spec §7.2):
//   hs[m][c] = H_c (state entering chunk c); after a group-last chunk H = 0, otherwise
//   H ← e^Γ H + K̃ᵀ X, X = σ U − W̃ H with σ = 1 on source chunks (bit m of c clear), else 0;
//   X is stored too (xs_at), for grad_gdn_lvl.
// The BV = 8 columns are two vec4 halves: X by (row, dk half) with partial sums, the state
// update by dk row, so every fpack word loaded feeds 8 products; X reads W̃ᵀ (fpt) so that a
// warp's rows are consecutive words.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read_write> states: array<f32>; // hs[m][c]
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;
@group(0) @binding(5) var<storage, read> fpt: array<f32>;

fn load4(base: u32, ok: vec4<bool>) -> vec4<f32> {
    var r = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (ok[j]) {
            r[j] = fpack[base + j];
        }
    }
    return r;
}

@compute @workgroup_size(128) // 2C: one thread per (row, dk half) in phase A
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = P.head0 + wg.y;
    let m = wg.z;
    let nbv = min(BV, P.dv - v0);
    let dk = P.dk;
    let ns = dk * 2u;
    zero_state(lid, ns);
    let fs = P.group_heads * f_stride();
    workgroupBarrier();
    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * CHUNK;
        let n = chunk_rows(c);
        let sb = state_at(m, c, h);
        store_state(lid, ns, sb, v0, nbv);
        if (group_last(c, m) || c + 1u == P.nt) {
            zero_state(lid, ns);
            workgroupBarrier();
            continue;
        }
        // Phase A: partial sums of W̃ H over one dk half (H = 0 entering the first chunk of a
        // group of 2^(m+1)).
        let h_zero = (c & ((2u << m) - 1u)) == 0u;
        partial_products(lid, c, h, n, 1u, h_zero);
        workgroupBarrier();
        if (lid < 2u * CHUNK) {
            let i = lid % CHUNK;
            let hf = lid / CHUNK;
            var x = vec4<f32>(0.0);
            if (i < n) {
                let d = hf * 4u;
                let ok = vec4<u32>(d, d + 1u, d + 2u, d + 3u) < vec4<u32>(nbv);
                if (!reads(c, m)) {
                    x = load4(frow(t0 + i, h) + 3u * dk + v0 + d, ok);
                }
                x -= part[i * 2u + hf] + part[(CHUNK + i) * 2u + hf];
                for (var j = 0u; j < 4u; j++) {
                    if (ok[j]) {
                        xs[xs_at(m, c, h) + i * P.dv + v0 + d + j] = x[j];
                    }
                }
            }
            xw[i * 2u + hf] = x;
        }
        workgroupBarrier();
        // Phase B: the state update of one dk row (both halves) per thread.
        let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
        for (var kk = lid; kk < dk; kk += 128u) {
            var s0 = eg * st[kk * 2u];
            var s1 = eg * st[kk * 2u + 1u];
            // fpack rows of consecutive tokens are `fs` words apart.
            var f = frow(t0, h) + dk + kk;
            var i = 0u;
            // Four tokens per step: four loads in flight.
            for (; i + 3u < n; i += 4u) {
                let k0 = fpack[f];
                let k1 = fpack[f + fs];
                let k2 = fpack[f + 2u * fs];
                let k3 = fpack[f + 3u * fs];
                let x = i * 2u;
                s0 += k0 * xw[x] + k1 * xw[x + 2u] + k2 * xw[x + 4u] + k3 * xw[x + 6u];
                s1 += k0 * xw[x + 1u] + k1 * xw[x + 3u] + k2 * xw[x + 5u] + k3 * xw[x + 7u];
                f += 4u * fs;
            }
            for (; i < n; i++) {
                let kv = fpack[f];
                s0 += kv * xw[i * 2u];
                s1 += kv * xw[i * 2u + 1u];
                f += fs;
            }
            st[kk * 2u] = s0;
            st[kk * 2u + 1u] = s1;
        }
        workgroupBarrier();
    }
}
