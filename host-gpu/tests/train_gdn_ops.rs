//! Each training kernel (forward and backward) against f64 CPU references: forwards against a
//! direct f64 port, backwards against central finite differences of that port
//! (L = Σ dy · f(x) with a random dy), on tiny shapes with batch 2 in (t, b) row order.

use loglinear_host_gpu::train::kernels::{
    ConvShape, EmbedShape, GateIo, GateShape, GateSiluGradIo, LinearGradIo, LinearShape, LossIo,
    LossShape, NormGrads, NormIo, QkvIo, QkvShape, Step, TrainKernels,
};
use loglinear_host_gpu::{Gpu, Rows};
use loglinear_tests::random::{uniform_f32, SplitMix64};

/// The f32 adapter the tests run on (lavapipe in CI).
fn gpu() -> Gpu {
    Gpu::new_fp32().expect("GPU adapter (lavapipe)")
}

fn up(gpu: &Gpu, x: &[f32]) -> wgpu::Buffer {
    gpu.storage_from("t", x).unwrap()
}

fn zeros(gpu: &Gpu, n: usize) -> wgpu::Buffer {
    gpu.storage_zeroed("z", 4 * n as u64).unwrap()
}

fn run(gpu: &Gpu, steps: &[&Step]) {
    let mut enc = gpu.encoder("t");
    for s in steps {
        s.encode(&mut enc);
    }
    gpu.submit_and_wait(enc).unwrap();
}

fn read(gpu: &Gpu, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
    let mut v = gpu.read_f32(b).unwrap();
    v.truncate(n);
    v
}

fn d64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// ‖a − b‖ / ‖b‖.
fn rel_l2(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-300)).sqrt()
}

fn check(what: &str, got: &[f32], want: &[f64], tol: f64) {
    let e = rel_l2(got, want);
    eprintln!("{what}: rel L2 {e:.2e}");
    assert!(e <= tol, "{what}: rel L2 {e:.3e} > {tol:.0e}");
}

/// ∇ of f at x by central differences (f64).
fn fd(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let h = 1e-6 * x[i].abs().max(1.0);
            let x0 = x[i];
            x[i] = x0 + h;
            let a = f(&x);
            x[i] = x0 - h;
            let b = f(&x);
            x[i] = x0;
            (a - b) / (2.0 * h)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * *y as f64).sum()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}
fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[test]
fn linear_forward_and_backward() {
    // X columns [2, 2 + 70) of rows of 75; Y columns [3, 3 + 67) of rows of 72.
    linear_case(37, 70, 67, 75, 2, 72, 3);
    // Many rows: the weight gradient splits k (2100 rows → 4 splits).
    linear_case(2100, 20, 24, 21, 1, 26, 2);
}

fn linear_case(
    rows: usize,
    in_dim: usize,
    out_dim: usize,
    xs: usize,
    xo: usize,
    ys: usize,
    yo: usize,
) {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(1);
    let x = uniform_f32(&mut r, rows * xs, 1.0);
    let w = uniform_f32(&mut r, out_dim * in_dim, 1.0);
    let dy = uniform_f32(&mut r, rows * ys, 1.0);
    let dw0 = uniform_f32(&mut r, out_dim * in_dim, 1.0);
    let dx0 = uniform_f32(&mut r, rows * xs, 1.0);
    let (bx, bw, bdy) = (up(&gpu, &x), up(&gpu, &w), up(&gpu, &dy));
    let by = zeros(&gpu, rows * ys);
    let (bdw, bdx) = (up(&gpu, &dw0), up(&gpu, &dx0));
    let shape = LinearShape {
        rows,
        in_dim,
        out_dim,
    };
    let fwd = k
        .linear(
            &gpu,
            shape,
            Rows::new(&bx, xo, xs),
            &bw,
            Rows::new(&by, yo, ys),
        )
        .unwrap();
    let grad_io = LinearGradIo {
        x: Rows::new(&bx, xo, xs),
        w: &bw,
        dw: &bdw,
        dy: Rows::new(&bdy, yo, ys),
        dx: Rows::new(&bdx, xo, xs),
        accumulate_dx: true,
    };
    let [bx_step, bw_step] = k.linear_backward(&gpu, shape, grad_io).unwrap();
    run(&gpu, &[&fwd, &bx_step, &bw_step]);
    let y = read(&gpu, &by, rows * ys);
    let mut want_y = vec![0.0; rows * out_dim];
    let mut got_y = vec![0.0f32; rows * out_dim];
    let mut want_dx = d64(&dx0);
    let mut want_dw = d64(&dw0);
    for i in 0..rows {
        for o in 0..out_dim {
            let mut s = 0.0;
            for j in 0..in_dim {
                s += x[i * xs + xo + j] as f64 * w[o * in_dim + j] as f64;
                want_dx[i * xs + xo + j] += dy[i * ys + yo + o] as f64 * w[o * in_dim + j] as f64;
                want_dw[o * in_dim + j] += dy[i * ys + yo + o] as f64 * x[i * xs + xo + j] as f64;
            }
            want_y[i * out_dim + o] = s;
            got_y[i * out_dim + o] = y[i * ys + yo + o];
        }
    }
    check("linear y", &got_y, &want_y, 1e-6);
    check(
        "linear dx (added)",
        &read(&gpu, &bdx, rows * xs),
        &want_dx,
        1e-6,
    );
    check(
        "linear dw (added)",
        &read(&gpu, &bdw, out_dim * in_dim),
        &want_dw,
        1e-6,
    );
}

fn rmsnorm64(x: &[f64], w: &[f64], cols: usize, eps: f64) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + eps).sqrt();
            row.iter()
                .zip(w)
                .map(move |(v, wi)| v * r * wi)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn rmsnorm_forward_and_backward() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(2);
    let (rows, cols, eps) = (11, 80, 1e-6f32);
    let x = uniform_f32(&mut r, rows * cols, 1.0);
    let w = uniform_f32(&mut r, cols, 1.0);
    let dy = uniform_f32(&mut r, rows * cols, 1.0);
    let dx0 = uniform_f32(&mut r, rows * cols, 1.0);
    let dw0 = uniform_f32(&mut r, cols, 1.0);
    let (bx, bw, bdy, bdx, bdw) = (
        up(&gpu, &x),
        up(&gpu, &w),
        up(&gpu, &dy),
        up(&gpu, &dx0),
        up(&gpu, &dw0),
    );
    let (out, rstd, wrow) = (
        zeros(&gpu, rows * cols),
        zeros(&gpu, rows),
        zeros(&gpu, rows * cols),
    );
    let norm_io = NormIo {
        x: &bx,
        w: &bw,
        out: &out,
        rstd: &rstd,
    };
    let f = k.rmsnorm(&gpu, norm_io, rows, cols, eps).unwrap();
    let grads = NormGrads {
        dy: &bdy,
        dx: &bdx,
        wrow: &wrow,
    };
    let b = k
        .rmsnorm_backward(&gpu, norm_io, grads, rows, cols, true)
        .unwrap();
    let s = k
        .colsum(&gpu, Rows::new(&wrow, 0, cols), rows, cols, &bdw)
        .unwrap();
    run(&gpu, &[&f, &b, &s]);
    let (x64, w64) = (d64(&x), d64(&w));
    check(
        "rmsnorm y",
        &read(&gpu, &out, rows * cols),
        &rmsnorm64(&x64, &w64, cols, eps as f64),
        1e-6,
    );
    let gx = fd(&|xx| dot(&rmsnorm64(xx, &w64, cols, eps as f64), &dy), &x64);
    let want_dx: Vec<f64> = gx.iter().zip(&dx0).map(|(g, d)| g + *d as f64).collect();
    check("rmsnorm dx", &read(&gpu, &bdx, rows * cols), &want_dx, 1e-5);
    let gw = fd(&|ww| dot(&rmsnorm64(&x64, ww, cols, eps as f64), &dy), &w64);
    let want_dw: Vec<f64> = gw.iter().zip(&dw0).map(|(g, d)| g + *d as f64).collect();
    check("rmsnorm dw", &read(&gpu, &bdw, cols), &want_dw, 1e-5);
}

/// Causal conv + SiLU over rows (t, b) of `stride`, channels [c0, c0 + channels).
fn conv64(inp: &[f64], w: &[f64], s: &ConvShape) -> Vec<f64> {
    let (rows, batch, stride, c0, ch, width) =
        (s.rows, s.batch, s.stride, s.c0, s.channels, s.width);
    let mut out = vec![0.0; rows * ch];
    for r in 0..rows {
        let t = r / batch;
        for c in 0..ch {
            let mut s = 0.0;
            for j in 0..width {
                let back = width - 1 - j;
                if t >= back {
                    s += inp[(r - back * batch) * stride + c0 + c] * w[c * width + j];
                }
            }
            out[r * ch + c] = silu(s);
        }
    }
    out
}

#[test]
fn conv_forward_and_backward() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(3);
    let (t, batch, stride, c0, ch, width) = (9, 2, 13, 4, 7, 4);
    let rows = t * batch;
    let inp = uniform_f32(&mut r, rows * stride, 1.5);
    let w = uniform_f32(&mut r, ch * width, 1.0);
    let dout = uniform_f32(&mut r, rows * stride, 1.0);
    let dw0 = uniform_f32(&mut r, ch * width, 1.0);
    let (bi, bw, bd, bdw) = (
        up(&gpu, &inp),
        up(&gpu, &w),
        up(&gpu, &dout),
        up(&gpu, &dw0),
    );
    let (pre, out, din) = (
        zeros(&gpu, rows * stride),
        zeros(&gpu, rows * stride),
        zeros(&gpu, rows * stride),
    );
    let shape = ConvShape {
        rows,
        batch,
        stride,
        c0,
        channels: ch,
        width,
    };
    let f = k.conv(&gpu, &bi, &bw, &pre, &out, shape).unwrap();
    let bx = k.conv_backward(&gpu, &pre, &bd, &bw, &din, shape).unwrap();
    let bww = k
        .conv_backward_w(&gpu, &pre, &bd, &bi, &bdw, shape)
        .unwrap();
    run(&gpu, &[&f, &bx, &bww]);
    let (i64_, w64) = (d64(&inp), d64(&w));
    let cols = |v: &[f32]| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| v[r * stride + c0..r * stride + c0 + ch].to_vec())
            .collect()
    };
    let dsel = cols(&dout);
    check(
        "conv out",
        &cols(&read(&gpu, &out, rows * stride)),
        &conv64(&i64_, &w64, &shape),
        1e-6,
    );
    let gi = fd(&|xx| dot(&conv64(xx, &w64, &shape), &dsel), &i64_);
    let gi_sel: Vec<f64> = (0..rows)
        .flat_map(|r| gi[r * stride + c0..r * stride + c0 + ch].to_vec())
        .collect();
    check(
        "conv din",
        &cols(&read(&gpu, &din, rows * stride)),
        &gi_sel,
        1e-5,
    );
    let gw = fd(&|ww| dot(&conv64(&i64_, ww, &shape), &dsel), &w64);
    let want: Vec<f64> = gw.iter().zip(&dw0).map(|(g, d)| g + *d as f64).collect();
    check("conv dw", &read(&gpu, &bdw, ch * width), &want, 1e-5);
}

/// q_used | k_used | v of one row set (as the kernel's outputs, concatenated).
fn qkv64(x: &[f64], rows: usize, h: usize, dk: usize, dv: usize) -> Vec<f64> {
    let chn = h * (2 * dk + dv);
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    let s = 1.0 / (dk as f64).sqrt();
    for r in 0..rows {
        for hh in 0..h {
            let qb = r * chn + hh * dk;
            let kb = r * chn + h * dk + hh * dk;
            let vb = r * chn + 2 * h * dk + hh * dv;
            let nq = 1.0 / (x[qb..qb + dk].iter().map(|a| a * a).sum::<f64>() + 1e-6).sqrt();
            let nk = 1.0 / (x[kb..kb + dk].iter().map(|a| a * a).sum::<f64>() + 1e-6).sqrt();
            q.extend(x[qb..qb + dk].iter().map(|a| a * nq * s));
            k.extend(x[kb..kb + dk].iter().map(|a| a * nk));
            v.extend_from_slice(&x[vb..vb + dv]);
        }
    }
    q.extend(k);
    q.extend(v);
    q
}

#[test]
fn qkv_forward_and_backward() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(4);
    let (rows, h, dk, dv) = (6, 2, 8, 16);
    let chn = h * (2 * dk + dv);
    let x = uniform_f32(&mut r, rows * chn, 1.0);
    let (kd, vd) = (rows * h * dk, rows * h * dv);
    let dq = uniform_f32(&mut r, kd, 1.0);
    let dkk = uniform_f32(&mut r, kd, 1.0);
    let dvv = uniform_f32(&mut r, vd, 1.0);
    let bx = up(&gpu, &x);
    let (q, kk, v, dx) = (
        zeros(&gpu, kd),
        zeros(&gpu, kd),
        zeros(&gpu, vd),
        zeros(&gpu, rows * chn),
    );
    let (bdq, bdk, bdv) = (up(&gpu, &dq), up(&gpu, &dkk), up(&gpu, &dvv));
    let shape = QkvShape {
        rows,
        heads: h,
        dk,
        dv,
    };
    let io = |q, k, v| QkvIo {
        x: &bx,
        dx: &dx,
        q,
        k,
        v,
    };
    let f = k.qkv(&gpu, io(&q, &kk, &v), shape, false).unwrap();
    let b = k.qkv(&gpu, io(&bdq, &bdk, &bdv), shape, true).unwrap();
    run(&gpu, &[&f, &b]);
    let want = qkv64(&d64(&x), rows, h, dk, dv);
    let mut got = read(&gpu, &q, kd);
    got.extend(read(&gpu, &kk, kd));
    got.extend(read(&gpu, &v, vd));
    check("qkv forward", &got, &want, 1e-6);
    let mut dall = dq.clone();
    dall.extend(&dkk);
    dall.extend(&dvv);
    let g = fd(&|xx| dot(&qkv64(xx, rows, h, dk, dv), &dall), &d64(&x));
    check("qkv backward", &read(&gpu, &dx, rows * chn), &g, 1e-5);
}

/// β | g | λ of the gates (concatenated), from abl and the parameters [dt_bias | A_log | L].
fn gates64(abl: &[f64], pv: &[f64], s: &GateShape) -> Vec<f64> {
    let (rows, h, lc, stride, ll, dk) = (
        s.rows,
        s.heads,
        s.lambda_cols,
        s.abl_stride,
        s.log_linear,
        s.dk,
    );
    let (dtb, alog, l) = (&pv[..h], &pv[h..2 * h], &pv[2 * h..]);
    let (mut beta, mut g, mut lam) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rows {
        for hh in 0..h {
            let row = r * stride;
            beta.push(sigmoid(abl[row + h + hh]));
            g.push(-alog[hh].exp() * softplus(abl[row + hh] + dtb[hh]));
            for c in 0..lc {
                lam.push(if ll {
                    softplus(l[hh * 15 + c] * abl[row + 2 * h + hh * 15 + c]) * (dk as f64).sqrt()
                } else {
                    1.0
                });
            }
        }
    }
    beta.extend(g);
    beta.extend(lam);
    beta
}

#[test]
fn gates_forward_and_backward() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    for ll in [true, false] {
        let mut r = SplitMix64::new(5);
        let (rows, h, dk) = (7, 2, 16);
        let lc = if ll { 15 } else { 4 };
        let levels = 4;
        let stride = 2 * h + if ll { 15 * h } else { 0 };
        let pw = 17 * h;
        let abl = uniform_f32(&mut r, rows * stride, 2.0);
        let dtb = uniform_f32(&mut r, h, 1.0);
        let alog = uniform_f32(&mut r, h, 1.0);
        let lsc = uniform_f32(&mut r, 15 * h, 1.5);
        let dbeta = uniform_f32(&mut r, rows * h, 1.0);
        let dg = uniform_f32(&mut r, rows * h, 1.0);
        // The operator writes 0 in columns no token reads.
        let mut dlam = uniform_f32(&mut r, rows * h * lc, 1.0);
        for (i, x) in dlam.iter_mut().enumerate() {
            if i % lc >= levels {
                *x = 0.0;
            }
        }
        let (ba, bdt, bal, bl) = (
            up(&gpu, &abl),
            up(&gpu, &dtb),
            up(&gpu, &alog),
            up(&gpu, &lsc),
        );
        let (beta, g, lam) = (
            zeros(&gpu, rows * h),
            zeros(&gpu, rows * h),
            zeros(&gpu, rows * h * lc),
        );
        let (bdb, bdg, bdl) = (up(&gpu, &dbeta), up(&gpu, &dg), up(&gpu, &dlam));
        let (dabl, prow) = (zeros(&gpu, rows * stride), zeros(&gpu, rows * pw));
        let (gdt, gal, gl) = (zeros(&gpu, h), zeros(&gpu, h), zeros(&gpu, 15 * h));
        let shape = GateShape {
            rows,
            heads: h,
            lambda_cols: lc,
            abl_stride: stride,
            log_linear: ll,
            dk,
            levels,
        };
        let io = |beta, g, lam| GateIo {
            abl: &ba,
            dt_bias: &bdt,
            a_log: &bal,
            l_scale: &bl,
            beta,
            g,
            lam,
            dabl: &dabl,
            prow: &prow,
        };
        let f = k.gates(&gpu, io(&beta, &g, &lam), shape, false).unwrap();
        let b = k.gates(&gpu, io(&bdb, &bdg, &bdl), shape, true).unwrap();
        let s1 = k
            .colsum(&gpu, Rows::new(&prow, 0, pw), rows, h, &gal)
            .unwrap();
        let s2 = k
            .colsum(&gpu, Rows::new(&prow, h, pw), rows, h, &gdt)
            .unwrap();
        let s3 = k
            .colsum(&gpu, Rows::new(&prow, 2 * h, pw), rows, 15 * h, &gl)
            .unwrap();
        run(&gpu, &[&f, &b, &s1, &s2, &s3]);
        let mut pv = d64(&dtb);
        pv.extend(d64(&alog));
        pv.extend(d64(&lsc));
        let a64 = d64(&abl);
        let mut got = read(&gpu, &beta, rows * h);
        got.extend(read(&gpu, &g, rows * h));
        got.extend(read(&gpu, &lam, rows * h * lc));
        let tag = if ll { "LL" } else { "plain" };
        check(
            &format!("gates forward {tag}"),
            &got,
            &gates64(&a64, &pv, &shape),
            1e-6,
        );
        let mut dall = dbeta.clone();
        dall.extend(&dg);
        dall.extend(&dlam);
        let ga = fd(&|xx| dot(&gates64(xx, &pv, &shape), &dall), &a64);
        check(
            &format!("gates dabl {tag}"),
            &read(&gpu, &dabl, rows * stride),
            &ga,
            1e-5,
        );
        let gp = fd(&|pp| dot(&gates64(&a64, pp, &shape), &dall), &pv);
        let mut got_p = read(&gpu, &gdt, h);
        got_p.extend(read(&gpu, &gal, h));
        let np = if ll { 17 * h } else { 2 * h };
        if ll {
            got_p.extend(read(&gpu, &gl, 15 * h));
        }
        check(&format!("gates dparams {tag}"), &got_p, &gp[..np], 1e-5);
    }
}

#[test]
fn gate_silu_forward_and_backward() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(6);
    let n = 300;
    let a = uniform_f32(&mut r, n, 2.0);
    let b = uniform_f32(&mut r, n, 4.0);
    let d = uniform_f32(&mut r, n, 1.0);
    let (ba, bb, bd) = (up(&gpu, &a), up(&gpu, &b), up(&gpu, &d));
    let (out, da, db) = (zeros(&gpu, n), zeros(&gpu, n), zeros(&gpu, n));
    let f = k.gate_silu(&gpu, &ba, &bb, &out, n).unwrap();
    let grad_io = GateSiluGradIo {
        a: &ba,
        b: &bb,
        dout: &bd,
        da: &da,
        db: &db,
    };
    let bw = k.gate_silu_backward(&gpu, grad_io, n).unwrap();
    run(&gpu, &[&f, &bw]);
    let want: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| *x as f64 * silu(*y as f64))
        .collect();
    check("gate_silu out", &read(&gpu, &out, n), &want, 1e-6);
    let (a64, b64) = (d64(&a), d64(&b));
    let fwd = |aa: &[f64], bb: &[f64]| -> Vec<f64> {
        aa.iter().zip(bb).map(|(x, y)| x * silu(*y)).collect()
    };
    check(
        "gate_silu da",
        &read(&gpu, &da, n),
        &fd(&|xx| dot(&fwd(xx, &b64), &d), &a64),
        1e-6,
    );
    check(
        "gate_silu db",
        &read(&gpu, &db, n),
        &fd(&|xx| dot(&fwd(&a64, xx), &d), &b64),
        1e-5,
    );
}

#[test]
fn embedding_and_loss_forward_and_backward() {
    embed_case(5, 2, 6, 11);
    // Several 256-row blocks, many rows per token, D over one workgroup's 256 columns.
    embed_case(150, 2, 300, 11);
}

/// The backward in blocks of several ids (a vocabulary of thousands) and of columns (rows
/// wider than one workgroup's block), against f64 sums.
#[test]
fn embedding_backward_in_blocks() {
    // 32 ids × 64 columns per workgroup.
    embed_backward_case(300, 2, 64, 8192);
    // An uneven last block of ids, and ids that no row has.
    embed_backward_case(40, 3, 20, 8200);
    // One id, columns in blocks of 2048 (the last one short).
    embed_backward_case(9, 2, 2100, 5);
}

fn embed_backward_case(t: usize, batch: usize, d: usize, vocab: usize) {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(11);
    let rows = t * batch;
    // Tokens spread over the vocabulary; half the rows repeat an earlier row's token.
    let tokens: Vec<u32> = (0..batch * (t + 1))
        .map(|i| (((i / 2) * 977 + 13) % vocab) as u32)
        .collect();
    let dx = uniform_f32(&mut r, rows * d, 1.0);
    let de0 = uniform_f32(&mut r, vocab * d, 1.0);
    let (bt, bdx, bde) = (
        gpu.storage_from("tokens", &tokens).unwrap(),
        up(&gpu, &dx),
        up(&gpu, &de0),
    );
    let shape = EmbedShape {
        seq_len: t,
        batch,
        d,
        vocab,
    };
    let b = k.embed_backward(&gpu, &bt, &bdx, &bde, shape).unwrap();
    run(&gpu, &[&b]);
    let id = |r: usize| tokens[(r % batch) * (t + 1) + r / batch] as usize;
    let mut want = d64(&de0);
    for r in 0..rows {
        for c in 0..d {
            want[id(r) * d + c] += dx[r * d + c] as f64;
        }
    }
    check("embed backward", &read(&gpu, &bde, vocab * d), &want, 1e-6);
}

fn embed_case(t: usize, batch: usize, d: usize, vocab: usize) {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let mut r = SplitMix64::new(7);
    let rows = t * batch;
    let tokens: Vec<u32> = (0..batch * (t + 1))
        .map(|i| ((i * 7 + 3) % vocab) as u32)
        .collect();
    let e = uniform_f32(&mut r, vocab * d, 1.0);
    let dx = uniform_f32(&mut r, rows * d, 1.0);
    let de0 = uniform_f32(&mut r, vocab * d, 1.0);
    let logits = uniform_f32(&mut r, rows * vocab, 3.0);
    let scale = [0.37f32];
    let (bt, be, bdx, bde, bl, bs) = (
        gpu.storage_from("tokens", &tokens).unwrap(),
        up(&gpu, &e),
        up(&gpu, &dx),
        up(&gpu, &de0),
        up(&gpu, &logits),
        up(&gpu, &scale),
    );
    let (x, lse, loss) = (zeros(&gpu, rows * d), zeros(&gpu, rows), zeros(&gpu, rows));
    let embed_shape = EmbedShape {
        seq_len: t,
        batch,
        d,
        vocab,
    };
    let f = k.embed(&gpu, &bt, &be, &x, embed_shape).unwrap();
    let b = k
        .embed_backward(&gpu, &bt, &bdx, &bde, embed_shape)
        .unwrap();
    let loss_io = LossIo {
        tokens: &bt,
        logits: &bl,
        lse: &lse,
        scale: &bs,
    };
    let loss_shape = LossShape::new(t, batch, vocab);
    let lf = k.loss(&gpu, loss_io, &loss, loss_shape).unwrap();
    // In place: the logits become dlogits.
    let lb = k.loss_backward(&gpu, loss_io, loss_shape).unwrap();
    run(&gpu, &[&f, &b, &lf, &lb]);
    let id = |r: usize| tokens[(r % batch) * (t + 1) + r / batch] as usize;
    let tgt = |r: usize| tokens[(r % batch) * (t + 1) + r / batch + 1] as usize;
    let want_x: Vec<f64> = (0..rows)
        .flat_map(|r| d64(&e[id(r) * d..(id(r) + 1) * d]))
        .collect();
    check("embed forward", &read(&gpu, &x, rows * d), &want_x, 0.0);
    let mut want_de = d64(&de0);
    for r in 0..rows {
        for c in 0..d {
            want_de[id(r) * d + c] += dx[r * d + c] as f64;
        }
    }
    // f32 sums of up to ~30 rows per token round to a rel L2 of about 1e-7 (1.03e-7 on
    // lavapipe in the larger case); 2e-7 holds that with a margin, and a row lost or added
    // is orders of magnitude above it.
    check(
        "embed backward",
        &read(&gpu, &bde, vocab * d),
        &want_de,
        2e-7,
    );
    let loss64 = |lg: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; rows];
        for r in 0..rows {
            let row = &lg[r * vocab..(r + 1) * vocab];
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            out[(r % batch) * t + r / batch] = lse - row[tgt(r)];
        }
        out
    };
    let l64 = d64(&logits);
    check(
        "loss forward",
        &read(&gpu, &loss, rows),
        &loss64(&l64),
        1e-6,
    );
    let g = fd(&|xx| loss64(xx).iter().sum::<f64>() * scale[0] as f64, &l64);
    check("loss backward", &read(&gpu, &bl, rows * vocab), &g, 1e-6);
}
