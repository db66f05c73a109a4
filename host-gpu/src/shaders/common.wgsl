// Scalar maths shared by the layer kernels, written as runtime/src/math.rs computes them.

// Logistic sigmoid; neither branch overflows.
fn sigmoid(x: f32) -> f32 {
    if (x >= 0.0) {
        return 1.0 / (1.0 + exp(-x));
    }
    let e = exp(x);
    return e / (1.0 + e);
}

fn silu(x: f32) -> f32 {
    return x * sigmoid(x);
}

// SiLU'(z) = σ(z)·(1 + z·(1 − σ(z))).
fn dsilu(z: f32) -> f32 {
    let s = sigmoid(z);
    return s * (1.0 + z * (1.0 - s));
}

// ln(1 + y) for y ≥ 0 without the cancellation of log(1 + y) at small y (WGSL has no log1p, and
// GPU log may have an absolute, not relative, error near 1): a short series below 1/16.
fn log1p_pos(y: f32) -> f32 {
    if (y < 0.0625) {
        // y − y²/2 + y³/3 − …, truncated after y⁷ (error < y⁸/8 < 1e-9 · y).
        return y * (1.0 + y * (-0.5 + y * (0.33333334 + y * (-0.25 + y * (0.2
            + y * (-0.16666667 + y * 0.14285715))))));
    }
    return log(1.0 + y);
}

// softplus with PyTorch's linear regime above 20.
fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return log1p_pos(exp(x));
}

// softplus' = sigmoid, 1 in the linear regime above 20 (as softplus).
fn dsoftplus(x: f32) -> f32 {
    if (x > 20.0) {
        return 1.0;
    }
    return sigmoid(x);
}

// λ column: softplus(L·x)·scale for a log-linear model, 1 for a plain one (every column).
fn lambda_col(log_linear: u32, l_scale: f32, x: f32, scale: f32) -> f32 {
    if (log_linear != 0u) {
        return softplus(l_scale * x) * scale;
    }
    return 1.0;
}

// Flat invocation index of a 1-D problem dispatched as a 2-D grid of 256-wide workgroups
// (a grid dimension holds at most 65535 workgroups).
fn flat_index(wg: vec3<u32>, nw: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nw.x + wg.x) * 256u + li;
}
