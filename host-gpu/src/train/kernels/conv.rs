//! The short causal depthwise conv + SiLU, forward and both backward sides.

use super::{grid, grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// Short conv + SiLU forward on channels `[c0, c0 + channels)` of rows of `stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        w: &wgpu::Buffer,
        pre: &wgpu::Buffer,
        out: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.conv,
            &[inp, w, pre, out],
            &shape.words()?,
            grid_threads(shape.rows * shape.channels)?,
        ))
    }

    /// Short conv backward, input side: `din` written on the same channels.
    pub fn conv_backward(
        &self,
        gpu: &Gpu,
        pre: &wgpu::Buffer,
        dout: &wgpu::Buffer,
        w: &wgpu::Buffer,
        din: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.conv_bwd,
            &[pre, dout, w, din],
            &shape.words()?,
            grid_threads(shape.rows * shape.channels)?,
        ))
    }

    /// Short conv backward, weight side: `dw += …` (`width` ≤ 8).
    pub fn conv_backward_w(
        &self,
        gpu: &Gpu,
        pre: &wgpu::Buffer,
        dout: &wgpu::Buffer,
        inp: &wgpu::Buffer,
        dw: &wgpu::Buffer,
        shape: ConvShape,
    ) -> Result<Step, GpuError> {
        if shape.width > 8 {
            return Err(GpuError::Invalid(format!(
                "conv width {} is over the training kernel's 8",
                shape.width
            )));
        }
        Ok(Self::step(
            gpu,
            &self.conv_bwd_w,
            &[pre, dout, inp, dw],
            &shape.words()?,
            grid(shape.channels)?,
        ))
    }
}

/// Sizes of one short-conv dispatch: `rows` rows (t, b) of `stride` floats, channels
/// `[c0, c0 + channels)`, `batch` sequences, kernel `width`.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub rows: usize,
    pub batch: usize,
    pub stride: usize,
    pub c0: usize,
    pub channels: usize,
    pub width: usize,
}

impl ConvShape {
    fn words(&self) -> Result<[u32; 6], GpuError> {
        Ok([
            u(self.rows)?,
            u(self.batch)?,
            u(self.stride)?,
            u(self.c0)?,
            u(self.channels)?,
            u(self.width)?,
        ])
    }
}
