//! The chunk scan's kernels: the WGSL sources each kernel is assembled from (chunk_common.wgsl
//! first, then its parts), and the pipelines compiled once per form ([`ScanKernels`]).

use super::Form;
use crate::gpu::{Gpu, GpuError, Kernel};

/// Workgroup memory the kernels need (the GDN intra kernel: two 64×64 f32 tiles).
const NEEDED_WORKGROUP_BYTES: u32 = 32768;
/// Storage buffers the GDN intra kernel binds.
const NEEDED_STORAGE_BUFFERS: u32 = 11;

const COMMON: &str = include_str!("../shaders/chunk_common.wgsl");
pub(crate) const GAMMA: &str = include_str!("../shaders/chunk_gamma.wgsl");
const INTRA_M2: &str = include_str!("../shaders/chunk_intra_m2.wgsl");
const INTRA_GDN: &str = include_str!("../shaders/chunk_intra_gdn.wgsl");
const SCAN_M2: &str = include_str!("../shaders/chunk_scan_m2.wgsl");
const SCAN_GDN: &str = include_str!("../shaders/chunk_scan_gdn.wgsl");
const SCAN_BODY: &str = include_str!("../shaders/chunk_scan_body.wgsl");
const COMBINE: &str = include_str!("../shaders/chunk_combine.wgsl");
const STATE: &str = include_str!("../shaders/chunk_state.wgsl");
const STATE_M2: &str = include_str!("../shaders/chunk_state_m2.wgsl");
const STATE_GDN: &str = include_str!("../shaders/chunk_state_gdn.wgsl");
const PRE_COMMON: &str = include_str!("../shaders/chunk_pre_common.wgsl");
const PRE_CONTRIB_M2: &str = include_str!("../shaders/chunk_pre_contrib_m2.wgsl");
/// The parts of `chunk_pre_contrib_m2` after chunk_common.wgsl.
const PRE_CONTRIB_PARTS: [&str; 3] = [ROWS16, PRE_CONTRIB_M2, PRE_COMMON];
const PRE_SWEEP: &str = include_str!("../shaders/chunk_pre_sweep.wgsl");
const PRE_PREFIX: &str = include_str!("../shaders/chunk_pre_prefix.wgsl");
const PRE_READ_COMMON: &str = include_str!("../shaders/chunk_pre_read_common.wgsl");
const PRE_READ_M2: &str = include_str!("../shaders/chunk_pre_read_m2.wgsl");
/// The parts of `chunk_pre_read_m2` after chunk_common.wgsl.
const PRE_READ_PARTS: [&str; 4] = [ROWS16, PRE_READ_COMMON, PRE_READ_M2, PRE_COMMON];

/// Rows16, sixteen rows of a tile product in four vec4 (shaders/common/rows16.wgsl).
pub(crate) const ROWS16: &str = include_str!("../shaders/common/rows16.wgsl");
/// The chunk's γ in workgroup memory (shaders/common/chunk_gammas.wgsl).
pub(crate) const GAMMAS: &str = include_str!("../shaders/common/chunk_gammas.wgsl");
/// Staged q / k panels of the intra-chunk score tiles (shaders/common/qk_panels.wgsl).
const QK_PANELS: &str = include_str!("../shaders/common/qk_panels.wgsl");
const TILE_READS: &str = include_str!("../shaders/common/tile_reads.wgsl");

/// shaders/common/tile_reads.wgsl for the C×C workgroup tile named `tile`: the functions
/// `{tile}_row4`, `{tile}_col4` and `{tile}_times_v` (needs [`ROWS16`]).
pub(crate) fn tile_reads(tile: &str) -> String {
    TILE_READS.replace("TILE", tile)
}

/// The intra-chunk kernel of `form`: its label and full source.
fn intra_source(form: Form) -> (&'static str, String) {
    match form {
        Form::Mamba2 => (
            "chunk_intra_m2",
            chunk_source(&[ROWS16, GAMMAS, &tile_reads("a_tile"), QK_PANELS, INTRA_M2]),
        ),
        Form::Gdn => (
            "chunk_intra_gdn",
            chunk_source(&[
                ROWS16,
                &tile_reads("sm"),
                &tile_reads("tm"),
                QK_PANELS,
                INTRA_GDN,
            ]),
        ),
    }
}

/// A chunk kernel's full source: chunk_common.wgsl, then `parts` in order.
pub(crate) fn chunk_source(parts: &[&str]) -> String {
    let mut s = String::from(COMMON);
    for p in parts {
        s.push('\n');
        s.push_str(p);
    }
    s
}

/// Kernels of the precomputed strategy (Mamba-2 only).
pub(super) struct PreKernels {
    pub(super) contrib: Kernel,
    pub(super) sweep: Kernel,
    pub(super) prefix: Kernel,
    pub(super) read: Kernel,
}

impl PreKernels {
    fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let src = chunk_source;
        Ok(Self {
            contrib: gpu.kernel("chunk_pre_contrib_m2", &src(&PRE_CONTRIB_PARTS), "main")?,
            sweep: gpu.kernel("chunk_pre_sweep", &src(&[PRE_SWEEP, PRE_COMMON]), "main")?,
            prefix: gpu.kernel("chunk_pre_prefix", &src(&[PRE_PREFIX, PRE_COMMON]), "main")?,
            read: gpu.kernel("chunk_pre_read_m2", &src(&PRE_READ_PARTS), "main")?,
        })
    }
}

/// Pipelines compiled once per form and reused for every layer and every prefill.
pub struct ScanKernels {
    pub(super) form: Form,
    pub(super) gamma: Kernel,
    pub(super) intra: Kernel,
    pub(super) intra_label: &'static str,
    pub(super) scan: Kernel,
    pub(super) combine: Kernel,
    pub(super) state: Kernel,
    pub(super) pre: Option<PreKernels>,
}

impl ScanKernels {
    /// Compiles the kernels of `form`. Fails with [`GpuError::Device`] when the adapter has less
    /// workgroup memory or fewer storage buffers per stage than the kernels need.
    pub fn new(gpu: &Gpu, form: Form) -> Result<Self, GpuError> {
        let l = &gpu.limits;
        if l.max_compute_workgroup_storage_size < NEEDED_WORKGROUP_BYTES {
            return Err(GpuError::Device(format!(
                "chunk scan needs {NEEDED_WORKGROUP_BYTES} bytes of workgroup memory, adapter has {}",
                l.max_compute_workgroup_storage_size
            )));
        }
        if l.max_storage_buffers_per_shader_stage < NEEDED_STORAGE_BUFFERS {
            return Err(GpuError::Device(format!(
                "chunk scan needs {NEEDED_STORAGE_BUFFERS} storage buffers per stage, adapter has {}",
                l.max_storage_buffers_per_shader_stage
            )));
        }
        let src = chunk_source;
        let (intra_label, intra_src) = intra_source(form);
        let (scan_label, scan_head) = match form {
            Form::Mamba2 => ("chunk_scan_m2", SCAN_M2),
            Form::Gdn => ("chunk_scan_gdn", SCAN_GDN),
        };
        // The Mamba-2 walk is its accessor header + the shared body; the GDN walk is one file.
        let scan_src = match form {
            Form::Mamba2 => src(&[scan_head, SCAN_BODY]),
            Form::Gdn => src(&[scan_head]),
        };
        Ok(Self {
            form,
            gamma: gpu.kernel("chunk_gamma", &src(&[GAMMA]), "main")?,
            intra: gpu.kernel(intra_label, &intra_src, "main")?,
            intra_label,
            scan: gpu.kernel(scan_label, &scan_src, "main")?,
            combine: gpu.kernel("chunk_combine", &src(&[COMBINE]), "main")?,
            state: gpu.kernel(
                "chunk_state",
                &src(&[
                    STATE,
                    match form {
                        Form::Mamba2 => STATE_M2,
                        Form::Gdn => STATE_GDN,
                    },
                ]),
                "main",
            )?,
            pre: match form {
                Form::Mamba2 => Some(PreKernels::new(gpu)?),
                Form::Gdn => None,
            },
        })
    }

    /// The form these kernels compute.
    pub fn form(&self) -> Form {
        self.form
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_scan::ChunkParams;
    use crate::gpu::wgsl_uniform_size;

    #[test]
    fn the_uniform_matches_every_forward_kernel() {
        let sources = [
            chunk_source(&[GAMMA]),
            intra_source(Form::Mamba2).1,
            intra_source(Form::Gdn).1,
            chunk_source(&[SCAN_M2, SCAN_BODY]),
            chunk_source(&[SCAN_GDN]),
            chunk_source(&[COMBINE]),
            chunk_source(&[STATE, STATE_M2]),
            chunk_source(&[STATE, STATE_GDN]),
            chunk_source(&PRE_CONTRIB_PARTS),
            chunk_source(&[PRE_SWEEP, PRE_COMMON]),
            chunk_source(&[PRE_PREFIX, PRE_COMMON]),
            chunk_source(&PRE_READ_PARTS),
        ];
        for source in &sources {
            assert_eq!(size_of::<ChunkParams>(), wgsl_uniform_size(source));
        }
    }
}
