//! The device, and the small set of helpers every kernel uses: storage buffers, uniform
//! parameters, compute pipelines from `.wgsl` files, and read-back.
//!
//! Buffer ownership: whoever creates a buffer owns it; kernels only borrow buffers through the
//! bind groups made from them. Nothing here caches behind the caller's back.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Workgroups in one grid dimension, at most: WebGPU's guaranteed
/// `maxComputeWorkgroupsPerDimension`, which every adapter allows.
pub const MAX_GROUPS: usize = 65535;

/// What can go wrong on the GPU side.
#[derive(Debug)]
pub enum GpuError {
    /// No adapter (no Vulkan/Metal/DX12 driver; on a CPU-only Linux machine install
    /// `mesa-vulkan-drivers` for lavapipe).
    NoAdapter(String),
    /// The adapter refused the device (features or limits).
    Device(String),
    /// A shader failed to compile or a pipeline failed validation.
    Shader { label: String, message: String },
    /// Mapping a buffer for read-back failed, or polling the device failed.
    Readback(String),
    /// A buffer would exceed the adapter's storage-binding limit.
    TooLarge {
        label: String,
        bytes: u64,
        limit: u64,
    },
    /// Inputs with the wrong shape or an unsupported model.
    Invalid(String),
    /// [`GpuOptions::adapter`] is past the end of the adapters [`adapters`] lists.
    NoSuchAdapter {
        index: usize,
        adapters: Vec<AdapterSummary>,
    },
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoAdapter(m) => write!(
                f,
                "no GPU adapter found ({m}); on Linux without a GPU install mesa-vulkan-drivers (lavapipe)"
            ),
            GpuError::Device(m) => write!(f, "GPU device request failed: {m}"),
            GpuError::Shader { label, message } => write!(f, "shader `{label}`: {message}"),
            GpuError::Readback(m) => write!(f, "GPU read-back failed: {m}"),
            GpuError::TooLarge {
                label,
                bytes,
                limit,
            } => write!(
                f,
                "buffer `{label}` needs {bytes} bytes, over the adapter's storage-binding limit of {limit}"
            ),
            GpuError::Invalid(m) => write!(f, "{m}"),
            GpuError::NoSuchAdapter { index, adapters } if adapters.is_empty() => write!(
                f,
                "no GPU adapter {index}: no adapters found; on Linux without a GPU install mesa-vulkan-drivers (lavapipe)"
            ),
            GpuError::NoSuchAdapter { index, adapters } => {
                let list: Vec<String> = adapters.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "no GPU adapter {index}; the adapters are {}",
                    list.join("; ")
                )
            }
        }
    }
}

impl std::error::Error for GpuError {}

/// One GPU device and its queue, with the optional features that were available.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// The cooperative-matrix configurations the adapter reports (subgroup scope, as wgpu
    /// filters them), whether or not they are used; empty on adapters without them (lavapipe).
    pub coop: Vec<wgpu::CooperativeMatrixProperties>,
    /// The configuration the projection matmuls use, or why they use the fp32 kernel.
    coop_matmul: Result<CoopMatmul, String>,
}

/// How to open the device.
#[derive(Clone, Copy, Debug)]
pub struct GpuOptions {
    /// Run the projection matmuls on cooperative matrices (tensor cores) when the adapter has
    /// a configuration the kernel supports. Their inputs are rounded to that configuration's
    /// type (f16 on NVIDIA), so results meet the reduced-precision tolerances of the golden
    /// README §7 (3e-3 / 3e-2), not the fp32 ones.
    pub cooperative_matrix: bool,
    /// The adapter: index i is the i-th of [`adapters`]; `None` lets wgpu choose (high
    /// performance preference).
    pub adapter: Option<usize>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            cooperative_matrix: true,
            adapter: None,
        }
    }
}

impl GpuOptions {
    /// The defaults, with `LOGLINEAR_GPU_NO_COOP=1` turning cooperative matrices off (for
    /// fp32 results on a GPU that has them).
    pub fn from_env() -> Self {
        let off = std::env::var("LOGLINEAR_GPU_NO_COOP").is_ok_and(|v| v == "1");
        Self {
            cooperative_matrix: !off,
            ..Self::default()
        }
    }
}

/// An adapter as [`adapters`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Its index for [`GpuOptions::adapter`].
    pub index: usize,
    pub name: String,
    pub backend: wgpu::Backend,
    pub device_type: wgpu::DeviceType,
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({:?}, {:?})",
            self.index, self.name, self.backend, self.device_type
        )
    }
}

/// The adapters that [`GpuOptions::adapter`] indexes, in its order: those of wgpu's primary
/// backends (Vulkan, Metal, DX12; or the ones `WGPU_BACKEND` names), discrete GPUs first, then
/// integrated, virtual, other and CPU ones (lavapipe), each kind in the driver's enumeration
/// order. OpenGL is left out, as it would list the Vulkan GPUs a second time; so index i is
/// the same device in every process of a machine.
pub fn adapters() -> Vec<AdapterSummary> {
    let list = pollster::block_on(ordered_adapters(&new_instance()));
    summaries(&list)
}

fn summaries(list: &[wgpu::Adapter]) -> Vec<AdapterSummary> {
    list.iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            AdapterSummary {
                index,
                name: info.name,
                backend: info.backend,
                device_type: info.device_type,
            }
        })
        .collect()
}

/// The instance every device and listing starts from (`WGPU_BACKEND` and the other wgpu
/// environment variables apply).
fn new_instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// The adapters in [`adapters`]' order.
async fn ordered_adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let mut list = instance
        .enumerate_adapters(wgpu::Backends::PRIMARY.with_env())
        .await;
    // A stable sort: each kind keeps the driver's order.
    list.sort_by_key(|a| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    });
    list
}

/// The cooperative-matrix configuration of the coop matmul kernel: S×S matrices
/// (M = N = K = S) of `input` elements, accumulated in f32, by subgroups of a fixed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopMatmul {
    pub size: u32,
    pub input: wgpu::CooperativeScalarType,
    pub subgroup_size: u32,
}

impl CoopMatmul {
    /// Rows and columns of Y per workgroup (8S: 128 for 16×16 matrices).
    pub fn tile(&self) -> u32 {
        8 * self.size
    }

    /// Invocations per workgroup: 8 subgroups, each computing 4S×2S of the tile.
    pub fn threads(&self) -> u32 {
        8 * self.subgroup_size
    }

    /// Workgroup memory of the kernel: two staged input tiles of 8S rows × 40 and an S×(S+4)
    /// f32 output block per subgroup.
    pub fn workgroup_bytes(&self) -> u32 {
        let elem = match self.input {
            wgpu::CooperativeScalarType::F16 => 2,
            _ => 4,
        };
        2 * self.tile() * 40 * elem + 8 * self.size * (self.size + 4) * 4
    }

    /// The WGSL header of a kernel on these matrices: the `enable` directives (which must come
    /// first), `alias ET` (the input element type), `alias MatA/MatB/MatC` (S×S matrices of
    /// roles A and B in ET, the accumulator C in f32), `const S`, `const SG` (the subgroup size)
    /// and `const THREADS` (8 subgroups).
    pub(crate) fn wgsl_header(&self) -> String {
        let (et, enable_f16) = match self.input {
            wgpu::CooperativeScalarType::F16 => ("f16", "enable f16;\n"),
            _ => ("f32", ""),
        };
        let s = self.size;
        format!(
            "{enable_f16}enable wgpu_cooperative_matrix;\n\
             alias ET = {et};\n\
             alias MatA = coop_mat{s}x{s}<{et}, A>;\n\
             alias MatB = coop_mat{s}x{s}<{et}, B>;\n\
             alias MatC = coop_mat{s}x{s}<f32, C>;\n\
             const S: u32 = {s}u;\n\
             const SG: u32 = {}u;\n\
             const THREADS: u32 = {}u;\n",
            self.subgroup_size,
            self.threads()
        )
    }

    /// "f16 16×16×16 → f32, subgroup 32".
    pub fn describe(&self) -> String {
        let s = self.size;
        format!(
            "{:?} {s}x{s}x{s} -> f32, subgroup {}",
            self.input, self.subgroup_size
        )
    }
}

/// The configuration the coop matmul kernel can use on this device, preferring f16 inputs
/// (twice the tensor-core rate of f32/TF32 where both exist) and larger matrices; or why none.
fn choose_coop_matmul(
    props: &[wgpu::CooperativeMatrixProperties],
    features: wgpu::Features,
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
) -> Result<CoopMatmul, String> {
    use wgpu::CooperativeScalarType as T;
    if props.is_empty() {
        return Err("the adapter has no cooperative matrices".into());
    }
    if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return Err("cooperative matrices turned off".into());
    }
    // The kernel names its subgroup with `subgroup_id` and sizes its workgroup for whole
    // subgroups, so it needs subgroups of one known size.
    if !features.contains(wgpu::Features::SUBGROUP) {
        return Err("the adapter has no subgroup operations".into());
    }
    if info.subgroup_min_size != info.subgroup_max_size {
        return Err(format!(
            "subgroup size varies ({}..{})",
            info.subgroup_min_size, info.subgroup_max_size
        ));
    }
    let mut best: Option<(u32, CoopMatmul)> = None;
    for p in props {
        let square = p.m_size == p.n_size && p.n_size == p.k_size && matches!(p.m_size, 8 | 16);
        let input_rank = match p.ab_type {
            T::F16 if features.contains(wgpu::Features::SHADER_F16) => 2,
            T::F32 => 1,
            _ => 0,
        };
        if !square || p.cr_type != T::F32 || input_rank == 0 {
            continue;
        }
        let cfg = CoopMatmul {
            size: p.m_size,
            input: p.ab_type,
            subgroup_size: info.subgroup_min_size,
        };
        let fits = cfg.threads() <= limits.max_compute_invocations_per_workgroup
            && cfg.threads() <= limits.max_compute_workgroup_size_x
            && cfg.workgroup_bytes() <= limits.max_compute_workgroup_storage_size;
        let rank = input_rank * 100 + p.m_size;
        if fits && best.is_none_or(|(r, _)| rank > r) {
            best = Some((rank, cfg));
        }
    }
    best.map(|(_, cfg)| cfg).ok_or_else(|| {
        "no square f16/f32 -> f32 configuration of size 8 or 16 fits the kernel".into()
    })
}

/// Scalar maths the layer and training kernels share (sigmoid, SiLU, softplus, …).
const COMMON_WGSL: &str = include_str!("shaders/common.wgsl");

/// The text of `shaders/common/<name>.wgsl`, a piece several kernels share, for `concat!` ahead
/// of a kernel's own file (each piece says what it needs from the kernel).
macro_rules! common_wgsl {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/shaders/common/",
            $name,
            ".wgsl"
        ))
    };
}
pub(crate) use common_wgsl;

/// A layer or training kernel's full source: common.wgsl, then `body`.
pub(crate) fn with_common(body: &str) -> String {
    format!("{COMMON_WGSL}\n{body}")
}

/// A row-major block of f32 values inside a buffer: rows of `stride` floats, the block's
/// columns starting at float `off` (a column slice of a wider matrix when its width is less
/// than `stride`).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: usize,
    pub stride: usize,
}

impl<'a> Rows<'a> {
    /// The columns from float `off` of rows of `stride` floats in `buf`.
    pub fn new(buf: &'a wgpu::Buffer, off: usize, stride: usize) -> Self {
        Self { buf, off, stride }
    }
}

/// A compute pipeline and the layout of its bind group 0.
pub struct Kernel {
    pub label: String,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

impl Gpu {
    /// The default adapter (high performance preference; lavapipe on CPU-only machines), with
    /// the adapter's own limits and whichever of SHADER_F16, SUBGROUP, TIMESTAMP_QUERY and
    /// EXPERIMENTAL_COOPERATIVE_MATRIX it has; [`GpuOptions::from_env`] decides about the last.
    pub fn new() -> Result<Self, GpuError> {
        Self::new_with(GpuOptions::from_env())
    }

    /// Exact fp32 everywhere (no cooperative matrices, whatever the adapter or the environment
    /// says): the path the fp32 golden tolerances (1e-4) are checked on.
    pub fn new_fp32() -> Result<Self, GpuError> {
        Self::new_with(GpuOptions {
            cooperative_matrix: false,
            adapter: None,
        })
    }

    /// As [`Gpu::new`], with explicit options (the environment is not read).
    pub fn new_with(options: GpuOptions) -> Result<Self, GpuError> {
        pollster::block_on(Self::new_async(options))
    }

    async fn new_async(options: GpuOptions) -> Result<Self, GpuError> {
        let instance = new_instance();
        let adapter = match options.adapter {
            None => instance
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    force_fallback_adapter: false,
                    compatible_surface: None,
                    apply_limit_buckets: false,
                })
                .await
                .map_err(|e| GpuError::NoAdapter(e.to_string()))?,
            Some(index) => {
                let mut list = ordered_adapters(&instance).await;
                if index >= list.len() {
                    return Err(GpuError::NoSuchAdapter {
                        index,
                        adapters: summaries(&list),
                    });
                }
                list.swap_remove(index)
            }
        };
        let wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        let coop = adapter.cooperative_matrix_properties();
        let mut features = adapter.features() & wanted;
        let use_coop = options.cooperative_matrix
            && adapter
                .features()
                .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        let experimental_features = if use_coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: experimental features may have bugs that cause undefined behaviour
            // from safe calls. Only the coop matmul shader (matmul_coop.wgsl) uses the
            // feature: naga validates it like every other shader (types, roles, pointer
            // spaces of the cooperative loads and stores), and only modules that use
            // cooperative types get the Vulkan memory model, so no other kernel changes.
            // Its results are checked against the golden data by tests/coop_matmul.rs on
            // such adapters, and LOGLINEAR_GPU_NO_COOP=1 / `GpuOptions` return to the fp32
            // kernel, which is what every adapter without the feature runs.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("loglinear"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| GpuError::Device(e.to_string()))?;
        let info = adapter.get_info();
        let coop_matmul = choose_coop_matmul(&coop, features, &info, &limits);
        Ok(Self {
            device,
            queue,
            info,
            limits,
            features,
            coop,
            coop_matmul,
        })
    }

    /// The cooperative-matrix configuration the projection matmuls use, if any.
    pub fn coop_matmul(&self) -> Option<CoopMatmul> {
        self.coop_matmul.as_ref().ok().copied()
    }

    /// "name (backend, device type, driver); matmul: …" for logs and benchmark tables.
    pub fn describe(&self) -> String {
        let matmul = match &self.coop_matmul {
            Ok(cfg) => format!("cooperative matrices {}", cfg.describe()),
            Err(why) => format!("fp32 ({why})"),
        };
        format!("{}; matmul: {matmul}", self.describe_adapter())
    }

    /// "name (backend, device type, driver)".
    pub fn describe_adapter(&self) -> String {
        let i = &self.info;
        format!(
            "{} ({:?}, {:?}, {} {})",
            i.name, i.backend, i.device_type, i.driver, i.driver_info
        )
    }

    /// "name (backend, device type, driver); training kernels: fp32", for the trainers' logs:
    /// the training graphs run every kernel in fp32 on any adapter (the cooperative-matrix
    /// matmul serves only the inference projections).
    pub fn describe_for_training(&self) -> String {
        format!("{}; training kernels: fp32", self.describe_adapter())
    }

    /// The most bytes one f32 scratch buffer bound to a kernel may have: the binding and
    /// buffer limits, and u32 element indices.
    pub(crate) fn scratch_limit(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
            .min(u64::from(u32::MAX) * 4)
    }

    fn check_size(&self, label: &str, bytes: u64) -> Result<(), GpuError> {
        let limit = self.limits.max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(GpuError::TooLarge {
                label: label.to_string(),
                bytes,
                limit,
            });
        }
        Ok(())
    }

    /// A storage buffer holding `data` (readable and writable by shaders, copyable both ways).
    pub fn storage_from<T: bytemuck::Pod>(
        &self,
        label: &str,
        data: &[T],
    ) -> Result<wgpu::Buffer, GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        // wgpu refuses zero-sized bindings; keep at least one word.
        let size = (bytes.len() as u64).max(4).next_multiple_of(4);
        self.check_size(label, size)?;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: storage_usage(),
            mapped_at_creation: false,
        });
        self.write_padded(&buf, bytes);
        Ok(buf)
    }

    /// A zero-filled storage buffer of `bytes` bytes (rounded up to a word, at least one).
    pub fn storage_zeroed(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
        let size = bytes.max(4).next_multiple_of(4);
        self.check_size(label, size)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: storage_usage(),
            mapped_at_creation: false,
        }))
    }

    /// A uniform buffer holding one `#[repr(C)]` parameter block.
    pub fn uniform_from<T: bytemuck::Pod>(&self, label: &str, value: &T) -> wgpu::Buffer {
        let bytes = bytemuck::bytes_of(value);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (bytes.len() as u64).max(16).next_multiple_of(16),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.write_padded(&buf, bytes);
        buf
    }

    /// Writes `data` into `buf` at byte 0 (queued; ordered before the next submit).
    pub fn write<T: bytemuck::Pod>(&self, buf: &wgpu::Buffer, data: &[T]) {
        self.write_padded(buf, bytemuck::cast_slice(data));
    }

    /// Queues a write of `bytes`, zero-padded to a whole word as `write_buffer` requires.
    fn write_padded(&self, buf: &wgpu::Buffer, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if bytes.len() % 4 == 0 {
            self.queue.write_buffer(buf, 0, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().next_multiple_of(4), 0);
            self.queue.write_buffer(buf, 0, &padded);
        }
    }

    /// Compiles `source` (WGSL) and makes a pipeline for `entry`, with the bind-group layout
    /// derived from the shader. Compile and validation errors come back as [`GpuError::Shader`].
    pub fn kernel(&self, label: &str, source: &str, entry: &str) -> Result<Kernel, GpuError> {
        // A driver that fails to build a pipeline reports an internal error, not a validation
        // one; catch both rather than panic in the uncaptured-error handler.
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            });
        let internal_err = pollster::block_on(internal.pop());
        if let Some(err) = pollster::block_on(scope.pop()).or(internal_err) {
            return Err(GpuError::Shader {
                label: label.to_string(),
                message: err.to_string(),
            });
        }
        let layout = pipeline.get_bind_group_layout(0);
        Ok(Kernel {
            label: label.to_string(),
            pipeline,
            layout,
        })
    }

    /// A bind group for `kernel` with `buffers[i]` at binding i of group 0.
    pub fn bind(&self, kernel: &Kernel, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&kernel.label),
            layout: &kernel.layout,
            entries: &entries,
        })
    }

    /// A command encoder.
    pub fn encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    /// Submits `encoder` and waits until the GPU is done.
    pub fn submit_and_wait(&self, encoder: wgpu::CommandEncoder) -> Result<(), GpuError> {
        self.queue.submit([encoder.finish()]);
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        Ok(())
    }

    /// Copies `buf` (all of it) back to the host as f32 values.
    pub fn read_f32(&self, buf: &wgpu::Buffer) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_bytes(buf, buf.size())?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Copies the first `len` bytes of `buf` back to the host.
    pub fn read_bytes(&self, buf: &wgpu::Buffer, len: u64) -> Result<Vec<u8>, GpuError> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: len.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.encoder("readback");
        enc.copy_buffer_to_buffer(buf, 0, &staging, 0, staging.size());
        self.queue.submit([enc.finish()]);
        let (tx, rx) = mpsc::channel();
        staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        rx.recv()
            .map_err(|e| GpuError::Readback(e.to_string()))?
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        let out = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| GpuError::Readback(e.to_string()))?[..len as usize]
            .to_vec();
        staging.unmap();
        Ok(out)
    }
}

fn storage_usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
}

/// Records one dispatch of `kernel` with `bind_group` into `encoder`.
pub fn dispatch(
    encoder: &mut wgpu::CommandEncoder,
    kernel: &Kernel,
    bind_group: &wgpu::BindGroup,
    workgroups: [u32; 3],
) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(&kernel.label),
        timestamp_writes: None,
    });
    record_dispatch(&mut pass, &kernel.pipeline, bind_group, workgroups);
}

static RECORDED_DISPATCHES: AtomicU64 = AtomicU64::new(0);

/// How many dispatches this process has recorded so far. Every kernel launch of the crate goes
/// through one recording function, so a benchmark can count a step's launches: the count of a
/// recording is the difference of two readings around it.
pub fn recorded_dispatches() -> u64 {
    RECORDED_DISPATCHES.load(Ordering::Relaxed)
}

/// Records one dispatch of `pipeline` with `bind_group` into an open pass, and counts it.
pub(crate) fn record_dispatch(
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    bind_group: &wgpu::BindGroup,
    workgroups: [u32; 3],
) {
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, bind_group, &[]);
    pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
    RECORDED_DISPATCHES.fetch_add(1, Ordering::Relaxed);
}

/// A 2-D grid of `n` workgroups laid out row by row (shaders rebuild the flat index).
pub(crate) fn grid(n: usize) -> Result<[u32; 3], GpuError> {
    let n = n.max(1);
    let x = n.min(MAX_GROUPS);
    let y = n.div_ceil(x);
    if y > MAX_GROUPS {
        return Err(GpuError::Invalid(format!(
            "{n} workgroups is over the dispatch limit"
        )));
    }
    Ok([x as u32, y as u32, 1])
}

/// Grid for `n` independent threads in 256-wide workgroups.
pub(crate) fn grid_threads(n: usize) -> Result<[u32; 3], GpuError> {
    grid(n.div_ceil(256))
}

/// A size as the u32 a uniform holds, or an error naming it.
pub(crate) fn u(n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).map_err(|_| GpuError::Invalid(format!("size {n} does not fit in 32 bits")))
}
/// The size in bytes that naga lays out for the one `var<uniform>` of WGSL `source`: what the
/// `#[repr(C)]` block bound there must measure.
#[cfg(test)]
pub(crate) fn wgsl_uniform_size(source: &str) -> usize {
    use wgpu::naga;
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string(source)));
    let uniforms: Vec<&naga::GlobalVariable> = module
        .global_variables
        .iter()
        .map(|(_, var)| var)
        .filter(|var| var.space == naga::AddressSpace::Uniform)
        .collect();
    assert_eq!(uniforms.len(), 1, "a kernel source binds one uniform block");
    module.types[uniforms[0].ty].inner.size(module.to_ctx()) as usize
}

/// Parses and validates WGSL `source` as the device would before compiling it, with every
/// capability on (cooperative matrices, f16, subgroups), so that kernels an adapter in CI
/// cannot build are still checked; panics naming `what` and the error.
#[cfg(test)]
pub(crate) fn wgsl_validate(what: &str, source: &str) {
    use wgpu::naga;
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
}

/// The bytes of workgroup memory that naga lays out for the `var<workgroup>` arrays of WGSL
/// `source`: what a kernel asks of the adapter's `max_compute_workgroup_storage_size`.
#[cfg(test)]
pub(crate) fn wgsl_workgroup_bytes(source: &str) -> u32 {
    use wgpu::naga;
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string(source)));
    module
        .global_variables
        .iter()
        .filter(|(_, var)| var.space == naga::AddressSpace::WorkGroup)
        .map(|(_, var)| module.types[var.ty].inner.size(module.to_ctx()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_a_kernel() {
        let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
        let src = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
                   @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
                   if (id.x < arrayLength(&x)) { x[id.x] = 2.0 * x[id.x] + 1.0; } }";
        let k = gpu.kernel("double", src, "main").unwrap();
        let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let buf = gpu.storage_from("x", &data).unwrap();
        let bg = gpu.bind(&k, &[&buf]);
        let mut enc = gpu.encoder("t");
        dispatch(&mut enc, &k, &bg, [2, 1, 1]);
        gpu.submit_and_wait(enc).unwrap();
        let out = gpu.read_f32(&buf).unwrap();
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v, 2.0 * i as f32 + 1.0);
        }
    }

    #[test]
    fn uniform_sizes_come_from_the_wgsl_layout() {
        // Five words, and a vec4 that naga aligns to 16 bytes after three words.
        let five = "struct P { a: u32, b: u32, c: f32, d: u32, e: u32 }\n\
                    @group(0) @binding(0) var<uniform> p: P;";
        assert_eq!(wgsl_uniform_size(five), 20);
        let aligned = "struct P { a: u32, b: u32, c: u32, v: vec4<f32> }\n\
                       @group(0) @binding(0) var<uniform> p: P;";
        assert_eq!(wgsl_uniform_size(aligned), 32);
    }

    #[test]
    fn an_adapter_is_chosen_by_its_index() {
        let list = adapters();
        assert!(!list.is_empty(), "no adapters (lavapipe in CI)");
        for (i, a) in list.iter().enumerate() {
            assert_eq!(a.index, i);
        }
        let last = list.len() - 1;
        let gpu = Gpu::new_with(GpuOptions {
            adapter: Some(last),
            ..GpuOptions::default()
        })
        .expect("the last adapter listed");
        assert_eq!(gpu.info.name, list[last].name);
        assert_eq!(gpu.info.backend, list[last].backend);
    }

    #[test]
    fn an_adapter_index_out_of_range_lists_the_adapters() {
        let list = adapters();
        let err = Gpu::new_with(GpuOptions {
            adapter: Some(list.len()),
            ..GpuOptions::default()
        })
        .err()
        .expect("an index past the list is refused");
        assert!(
            matches!(&err, GpuError::NoSuchAdapter { index, adapters } if *index == list.len() && *adapters == list),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("no GPU adapter {}", list.len())),
            "{message}"
        );
        for a in &list {
            assert!(message.contains(&a.to_string()), "{message}");
        }
    }

    #[test]
    fn a_broken_shader_is_an_error_not_a_panic() {
        let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
        let err = gpu.kernel("bad", "fn main( {", "main");
        assert!(matches!(err, Err(GpuError::Shader { .. })));
    }
}
