// GDN backward, step 3: the reverse scan of the level-state gradients. One workgroup per
// (BV columns of dv, head, chunk level m), chunks in reverse order. With D = dL/dH_{c+1}
// (0 after a group-last chunk and after the last chunk), stored as dhs[m][c]:
//   dL/dH_c = e^Γ D − W̃ᵀ dX + ρ Σ_i λ_i[c0+1+m] q̃_i dO_iᵀ   (ρ = 1 on reader chunks),
// dX = K̃ D stored too (xs_at), for grad_gdn_lvl. Thread layout as in grad_gdn_hscan.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read> lam: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read_write> states: array<f32>; // dhs[m][c]
@group(0) @binding(6) var<storage, read_write> dxs: array<f32>;
@group(0) @binding(7) var<storage, read> fpt: array<f32>;

// After phase A, part's second half holds λ_i dO_i ([C][2]) for phase B.

@compute @workgroup_size(128) // 2C: one thread per (row, dk half) in phase A
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = P.head0 + wg.y;
    let m = wg.z;
    let nbv = min(BV, P.dv - v0);
    let dk = P.dk;
    let ns = dk * 2u;
    let col = C0P1 + m;
    let fs = P.group_heads * f_stride();
    zero_state(lid, ns);
    for (var cc = 0u; cc < P.nt; cc++) {
        let c = P.nt - 1u - cc;
        let t0 = c * CHUNK;
        let n = chunk_rows(c);
        let sb = state_at(m, c, h);
        let rd = reads(c, m);
        let d_zero = group_last(c, m) || c + 1u == P.nt;
        if (d_zero) {
            zero_state(lid, ns);
        }
        store_state(lid, ns, sb, v0, nbv);
        workgroupBarrier();
        // Phase A: partial sums of K̃ D over one dk half (D = 0 after a group-last chunk).
        partial_products(lid, c, h, n, 0u, d_zero);
        workgroupBarrier();
        if (lid < 2u * CHUNK) {
            let i = lid % CHUNK;
            let hf = lid / CHUNK;
            var x = vec4<f32>(0.0);
            var ldo = vec4<f32>(0.0);
            if (i < n) {
                let d = hf * 4u;
                x = part[i * 2u + hf] + part[(CHUNK + i) * 2u + hf];
                let t = t0 + i;
                let l = lam[lam_idx(t, h, col)];
                for (var j = 0u; j < 4u; j++) {
                    if (d + j < nbv) {
                        dxs[xs_at(m, c, h) + i * P.dv + v0 + d + j] = x[j];
                        if (rd) {
                            ldo[j] = l * dout[(t * P.heads + h) * P.dv + v0 + d + j];
                        }
                    }
                }
            }
            xw[i * 2u + hf] = x;
            // Only this thread read this slot of the second half.
            part[(CHUNK + i) * 2u + hf] = ldo;
        }
        workgroupBarrier();
        // Phase B: the state-gradient update, one dk row per thread; not needed entering the
        // first chunk of a group (the state there is a reset 0).
        let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
        let first = (c & ((2u << m) - 1u)) == 0u;
        for (var kk = lid; kk < select(dk, 0u, first); kk += 128u) {
            var s0 = eg * st[kk * 2u];
            var s1 = eg * st[kk * 2u + 1u];
            // fpack rows of consecutive tokens are `fs` words apart.
            var f = frow(t0, h) + kk;
            // Two (reading) or four tokens per step, so that four loads are in flight.
            var i = 0u;
            if (rd) {
                for (; i + 1u < n; i += 2u) {
                    let q0 = fpack[f];
                    let w0 = fpack[f + 2u * dk];
                    let q1 = fpack[f + fs];
                    let w1 = fpack[f + fs + 2u * dk];
                    let x = i * 2u;
                    let o = (CHUNK + i) * 2u;
                    s0 += q0 * part[o] - w0 * xw[x] + q1 * part[o + 2u] - w1 * xw[x + 2u];
                    s1 += q0 * part[o + 1u] - w0 * xw[x + 1u] + q1 * part[o + 3u] - w1 * xw[x + 3u];
                    f += 2u * fs;
                }
                for (; i < n; i++) {
                    let qv = fpack[f];
                    let wv = fpack[f + 2u * dk];
                    s0 += qv * part[(CHUNK + i) * 2u] - wv * xw[i * 2u];
                    s1 += qv * part[(CHUNK + i) * 2u + 1u] - wv * xw[i * 2u + 1u];
                    f += fs;
                }
            } else {
                f += 2u * dk;
                for (; i + 3u < n; i += 4u) {
                    let w0 = fpack[f];
                    let w1 = fpack[f + fs];
                    let w2 = fpack[f + 2u * fs];
                    let w3 = fpack[f + 3u * fs];
                    let x = i * 2u;
                    s0 -= w0 * xw[x] + w1 * xw[x + 2u] + w2 * xw[x + 4u] + w3 * xw[x + 6u];
                    s1 -= w0 * xw[x + 1u] + w1 * xw[x + 3u] + w2 * xw[x + 5u] + w3 * xw[x + 7u];
                    f += 4u * fs;
                }
                for (; i < n; i++) {
                    let wv = fpack[f];
                    s0 -= wv * xw[i * 2u];
                    s1 -= wv * xw[i * 2u + 1u];
                    f += fs;
                }
            }
            st[kk * 2u] = s0;
            st[kk * 2u + 1u] = s1;
        }
        workgroupBarrier();
    }
}
