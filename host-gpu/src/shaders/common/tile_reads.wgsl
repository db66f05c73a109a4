// Reads of one C×C workgroup tile, row-major: instantiated per tile by chunk_scan::tile_reads,
// which names the tile for every TILE below (a kernel with two tiles includes this twice).
// Needs rows16.wgsl and the kernel's `v` binding ([t][heads][dv]).

// TILE[i][j..j+4].
fn TILE_row4(i: u32, j: u32) -> vec4<f32> {
    let b = i * CHUNK + j;
    return vec4<f32>(TILE[b], TILE[b + 1u], TILE[b + 2u], TILE[b + 3u]);
}

// TILE[i..i+4][j].
fn TILE_col4(i: u32, j: u32) -> vec4<f32> {
    return vec4<f32>(TILE[i * CHUNK + j], TILE[(i + 1u) * CHUNK + j], TILE[(i + 2u) * CHUNK + j], TILE[(i + 3u) * CHUNK + j]);
}

// Rows r0..r0+15 of TILE · V at column d, V the n rows of chunk t0, head h (TILE lower
// triangular, so j < min(n, r0 + 16)). One coalesced v load per row j serves 16 rows; j is
// unrolled by 4 so that four loads are in flight.
fn TILE_times_v(t0: u32, n: u32, h: u32, r0: u32, d: u32) -> Rows16 {
    var o = zero16();
    let jmax = min(n, r0 + 16u);
    let stride = P.heads * P.dv;
    let base = (t0 * P.heads + h) * P.dv + d;
    var j = 0u;
    for (; j + 3u < jmax; j += 4u) {
        let x = vec4<f32>(v[base + j * stride], v[base + (j + 1u) * stride],
                          v[base + (j + 2u) * stride], v[base + (j + 3u) * stride]);
        o.a += vec4<f32>(dot(TILE_row4(r0, j), x), dot(TILE_row4(r0 + 1u, j), x),
                         dot(TILE_row4(r0 + 2u, j), x), dot(TILE_row4(r0 + 3u, j), x));
        o.b += vec4<f32>(dot(TILE_row4(r0 + 4u, j), x), dot(TILE_row4(r0 + 5u, j), x),
                         dot(TILE_row4(r0 + 6u, j), x), dot(TILE_row4(r0 + 7u, j), x));
        o.c += vec4<f32>(dot(TILE_row4(r0 + 8u, j), x), dot(TILE_row4(r0 + 9u, j), x),
                         dot(TILE_row4(r0 + 10u, j), x), dot(TILE_row4(r0 + 11u, j), x));
        o.d += vec4<f32>(dot(TILE_row4(r0 + 12u, j), x), dot(TILE_row4(r0 + 13u, j), x),
                         dot(TILE_row4(r0 + 14u, j), x), dot(TILE_row4(r0 + 15u, j), x));
    }
    for (; j < jmax; j++) {
        let x = v[base + j * stride];
        o.a += x * TILE_col4(r0, j);
        o.b += x * TILE_col4(r0 + 4u, j);
        o.c += x * TILE_col4(r0 + 8u, j);
        o.d += x * TILE_col4(r0 + 12u, j);
    }
    return o;
}
