//! The short causal depthwise conv + SiLU, forward and both backward sides.

use super::{grid, grid_threads, u, Step, TrainKernels};
use crate::gpu::{common_wgsl, Gpu, GpuError};

pub(super) const CONV_WGSL: &str = concat!(
    common_wgsl!("train_conv_params"),
    include_str!("../../shaders/train_conv.wgsl")
);
pub(super) const CONV_BWD_WGSL: &str = concat!(
    common_wgsl!("train_conv_params"),
    include_str!("../../shaders/train_conv_bwd.wgsl")
);
pub(super) const CONV_BWD_W_WGSL: &str = concat!(
    common_wgsl!("train_conv_params"),
    include_str!("../../shaders/train_conv_bwd_w.wgsl")
);

/// `ConvParams` of train_conv.wgsl, train_conv_bwd.wgsl and train_conv_bwd_w.wgsl (one
/// layout).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvParams {
    rows: u32,
    batch: u32,
    stride: u32,
    c0: u32,
    channels: u32,
    width: u32,
}

impl TrainKernels {
    /// Short conv + SiLU forward on channels `[c0, c0 + channels)` of rows of `stride`.
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
            &shape.params()?,
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
            &shape.params()?,
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
            &shape.params()?,
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
    fn params(&self) -> Result<ConvParams, GpuError> {
        Ok(ConvParams {
            rows: u(self.rows)?,
            batch: u(self.batch)?,
            stride: u(self.stride)?,
            c0: u(self.c0)?,
            channels: u(self.channels)?,
            width: u(self.width)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, with_common};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<ConvParams>(), size(CONV_WGSL));
        assert_eq!(size_of::<ConvParams>(), size(CONV_BWD_WGSL));
        assert_eq!(size_of::<ConvParams>(), size(CONV_BWD_W_WGSL));
    }
}
