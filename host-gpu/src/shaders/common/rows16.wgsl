// Sixteen values of a tile product as four vec4: sixteen rows of one column (rows r0..r0+3,
// r0+4..r0+7, ...), or a thread's 4×4 block (row i in the i-th vec4). vec4 accumulators rather
// than a private array, which drivers may put in slow local memory.
struct Rows16 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

fn zero16() -> Rows16 {
    return Rows16(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
}

// The vec4 of rows 4q..4q+3.
fn quad_of(o: Rows16, q: u32) -> vec4<f32> {
    if (q == 0u) {
        return o.a;
    } else if (q == 1u) {
        return o.b;
    } else if (q == 2u) {
        return o.c;
    }
    return o.d;
}

fn row_of(o: Rows16, r: u32) -> f32 {
    return quad_of(o, r / 4u)[r % 4u];
}

// o plus the outer product a ⊗ b: row i of the 4×4 block o.a..o.d gains a[i] · b.
fn add_outer(o: Rows16, a: vec4<f32>, b: vec4<f32>) -> Rows16 {
    return Rows16(o.a + a.x * b, o.b + a.y * b, o.c + a.z * b, o.d + a.w * b);
}
