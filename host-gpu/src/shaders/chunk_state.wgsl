// The decoder's Fenwick state after token T-1 (runtime FenwickState + LevelPolicy, saturating
// top level). One workgroup per (block of 64 dv columns, head, state level j); a thread owns one
// column of the dk x dv matrix.
//   level j holds the tokens of its bucket, decayed to T-1. Tokens before the last chunk come
//   from the chunk scan (hstate, the state the last chunk reads at the matching chunk level);
//   tokens of the last chunk are stepped exactly as the decoder does: S = A_t S (+ β k vᵀ).
//   exact levels 1 <= j < top: bucket [(T-1 >> j) << j, + 2^(j-1)) if bit j-1 of T-1 is set;
//   level 0 < top: token T-1; top: every token before ((T-1) >> (top-1)) << (top-1) (all tokens
//   when top = 0, the plain single state).
// Mamba-2 needs no steps: S = e^{γ_{T-1}} S_scan + Σ_{s in bucket, s >= s0} e^{γ_{T-1} − γ_s} k_s v_sᵀ
// with the last chunk's local cumsums γ (exponents <= 0), one matrix entry at a time.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> hstate: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read> gam: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let col = wg.x * 64u + lid;
    let h = wg.y;
    let j = wg.z;
    if (col >= P.dv) {
        return;
    }
    let last = P.t - 1u;

    // A dead level (runtime LevelPolicy::is_live) is zero: skip the token steps.
    var live = j == 0u;
    if (j > 0u && j == P.top) {
        live = (last >> (P.top - 1u)) != 0u;
    } else if (j > 0u && j < P.top) {
        live = ((last >> (j - 1u)) & 1u) == 1u;
    }
    if (!live) {
        for (var kk = 0u; kk < P.dk; kk++) {
            state[((j * P.heads + h) * P.dk + kk) * P.dv + col] = 0.0;
        }
        return;
    }
    let s0 = (P.nt - 1u) * C;

    // Chunk level whose scan feeds this level, if any.
    var m = 0xffffffffu;
    if (j == P.top) {
        m = P.m_top;
    } else if (j >= C0P1) {
        m = j - C0P1;
    }
    let from_scan = m < P.n_scans;
    // Tokens [a, b) of the bucket that are inserted here (those before s0 came from the scan).
    var a = 0u;
    var b = 0u;
    if (j == P.top) {
        if (P.top == 0u) {
            b = P.t;
        } else {
            b = (last >> (P.top - 1u)) << (P.top - 1u);
        }
    } else if (j == 0u) {
        a = last;
        b = P.t;
    } else if (((last >> (j - 1u)) & 1u) == 1u) {
        a = (last >> j) << j;
        b = a + (1u << (j - 1u));
    }

    if (P.gdn == 0u) {
        let g_last = gam[last * P.heads + h];
        let a0 = max(a, s0);
        for (var kk = 0u; kk < P.dk; kk++) {
            var x = 0.0;
            if (from_scan) {
                x = exp(g_last) * hstate[((m * P.heads + h) * P.dk + kk) * P.dv + col];
            }
            for (var t = a0; t < b; t++) {
                let w = exp(g_last - gam[t * P.heads + h]);
                x += w * k[qk_row(t, h) + kk] * v[(t * P.heads + h) * P.dv + col];
            }
            state[((j * P.heads + h) * P.dk + kk) * P.dv + col] = x;
        }
        return;
    }

    // Gated DeltaNet: step the tokens of the last chunk like the decoder.
    var s: array<f32, 256>; // MAX_DK
    for (var kk = 0u; kk < P.dk; kk++) {
        var x = 0.0;
        if (from_scan) {
            x = hstate[((m * P.heads + h) * P.dk + kk) * P.dv + col];
        }
        s[kk] = x;
    }

    for (var t = s0; t < P.t; t++) {
        let alpha = exp(g[t * P.heads + h]);
        let kr = qk_row(t, h);
        let bt = beta[t * P.heads + h];
        var uu = 0.0;
        for (var kk = 0u; kk < P.dk; kk++) {
            uu += k[kr + kk] * s[kk];
        }
        for (var kk = 0u; kk < P.dk; kk++) {
            s[kk] = alpha * (s[kk] - bt * k[kr + kk] * uu);
        }
        if (t >= a && t < b) {
            let bv = bt * v[(t * P.heads + h) * P.dv + col];
            for (var kk = 0u; kk < P.dk; kk++) {
                s[kk] += k[kr + kk] * bv;
            }
        }
    }
    for (var kk = 0u; kk < P.dk; kk++) {
        state[((j * P.heads + h) * P.dk + kk) * P.dv + col] = s[kk];
    }
}
