//! `recorded_dispatches` counts every dispatch the crate records, and only those. One test in
//! its own binary: the count is process-wide, so no other test may record at the same time.

use loglinear_host_gpu::gpu::{dispatch, recorded_dispatches};
use loglinear_host_gpu::Gpu;

const ADD_ONE: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&x)) {
        x[id.x] += 1u;
    }
}
";

#[test]
fn each_recorded_dispatch_is_counted_once() {
    let gpu = Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
    let kernel = gpu.kernel("add_one", ADD_ONE, "main").unwrap();
    let x = gpu.storage_from("x", &[0u32; 100]).unwrap();
    let bind = gpu.bind(&kernel, &[&x]);

    let before = recorded_dispatches();
    let mut enc = gpu.encoder("three dispatches");
    for _ in 0..3 {
        dispatch(&mut enc, &kernel, &bind, [2, 1, 1]);
    }
    assert_eq!(recorded_dispatches() - before, 3);

    // Recording is what counts: submitting and reading back records nothing more.
    gpu.submit_and_wait(enc).unwrap();
    let out = gpu.read_bytes(&x, 400).unwrap();
    let out: Vec<u32> = out
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(out.iter().all(|&v| v == 3), "{out:?}");
    assert_eq!(recorded_dispatches() - before, 3);
}
