//! The training graphs: [`TrainGraph`], the API every model graph shares, so that trainers
//! hold a `Box<dyn TrainGraph>` picked by architecture. One skeleton ([`TrainModel`]:
//! embedding, blocks, final norm, head, loss) serves both architectures; each block is an
//! input norm, a token mixer, an output projection and a SwiGLU MLP with residuals
//! (`layer`), and only the mixer is the architecture's: a [`Mixer`], Gated DeltaNet in
//! [`gdn`], Mamba-2 in [`mamba2`], log-linear or plain. `init`: the options and
//! initialisation.

pub mod gdn;
mod graph;
mod init;
mod layer;
pub mod mamba2;
mod operator;
mod shared;
mod skeleton;

pub use graph::TrainGraph;
pub use init::{GraphOptions, InitScheme};
pub use layer::Mixer;
pub use shared::{Stage, StageMark};
pub use skeleton::TrainModel;

use crate::model::gdn::GdnTrainModel;
use crate::model::mamba2::Mamba2TrainModel;
use loglinear_host_gpu::gpu::{Gpu, GpuError};
use loglinear_runtime::{Arch, ModelConfig};

/// The training graph for `config`'s architecture: [`GdnTrainModel`] for (log-linear) Gated
/// DeltaNet, [`Mamba2TrainModel`] for (log-linear) Mamba-2.
pub fn new_train_graph(
    gpu: &Gpu,
    config: &ModelConfig,
    batch: usize,
    seq_len: usize,
) -> Result<Box<dyn TrainGraph>, GpuError> {
    new_train_graph_with(gpu, config, batch, seq_len, GraphOptions::default())
}

/// [`new_train_graph`] with training-only choices (a tied LM head, the initialisation).
pub fn new_train_graph_with(
    gpu: &Gpu,
    config: &ModelConfig,
    batch: usize,
    seq_len: usize,
    options: GraphOptions,
) -> Result<Box<dyn TrainGraph>, GpuError> {
    match config.arch {
        Arch::LogLinearGatedDeltaNet | Arch::GatedDeltaNet => Ok(Box::new(
            GdnTrainModel::with_options(gpu, config, batch, seq_len, options)?,
        )),
        Arch::LogLinearMamba2 | Arch::Mamba2 => Ok(Box::new(Mamba2TrainModel::with_options(
            gpu, config, batch, seq_len, options,
        )?)),
    }
}
