//! GPU timestamps between recorded passes, for the benchmarks' stage tables.
//!
//! A mark is an empty compute pass that writes one timestamp at its start, so marks work on
//! adapters without TIMESTAMP_QUERY_INSIDE_ENCODERS. Adapters without TIMESTAMP_QUERY give no
//! timer at all ([`Timestamps::new`] returns `None`), and the benchmarks fall back to wall time.

use crate::gpu::{Gpu, GpuError};

/// A query set of `marks` timestamps and the buffer it resolves into.
pub struct Timestamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    marks: u32,
    period_ns: f64,
}

impl Timestamps {
    /// Room for `marks` timestamps, or `None` when the adapter has no TIMESTAMP_QUERY.
    pub fn new(gpu: &Gpu, marks: u32) -> Option<Self> {
        if !gpu.features.contains(wgpu::Features::TIMESTAMP_QUERY) || marks == 0 {
            return None;
        }
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: marks,
        });
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: 8 * u64::from(marks),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Some(Self {
            set,
            resolve,
            marks,
            period_ns: f64::from(gpu.queue.get_timestamp_period()),
        })
    }

    /// The query set, for kernels that write their own pass timestamps
    /// (`ChunkScan::encode_timed`).
    pub fn query_set(&self) -> &wgpu::QuerySet {
        &self.set
    }

    /// Records timestamp `index` as an empty compute pass.
    pub fn mark(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        let _pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.set,
                beginning_of_pass_write_index: Some(index),
                end_of_pass_write_index: None,
            }),
        });
    }

    /// Records the copy of every timestamp into the resolve buffer; call it last in the
    /// encoder.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.resolve_query_set(&self.set, 0..self.marks, &self.resolve, 0);
    }

    /// Milliseconds between consecutive timestamps of the last submitted encoder (0 where a
    /// driver reports a later pass earlier).
    pub fn intervals_ms(&self, gpu: &Gpu) -> Result<Vec<f64>, GpuError> {
        let bytes = gpu.read_bytes(&self.resolve, 8 * u64::from(self.marks))?;
        let ticks: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        Ok(ticks
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]) as f64 * self.period_ns / 1e6)
            .collect())
    }
}

/// The median of `values` (the upper one of an even count); 0 for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
