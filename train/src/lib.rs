//! Training and fine-tuning Gated DeltaNet and Mamba-2 models (log-linear or plain) on a GPU
//! (wgpu), with checkpoints in the official layout:
//!
//! * [`model`]: the training graphs, forward with saved activations and backward, one per
//!   architecture, over `loglinear-host-gpu`'s kernels; [`schedule`]: the learning rate;
//! * [`data`]: token files, the validation split, seeded random windows, validation windows;
//! * [`checkpoint_dir`]: checkpoint folders (config.json, model.safetensors,
//!   optimizer.safetensors, trainer_state.json), written crash-safely;
//! * [`run`]: `loglinear train`, the loop over the model graph (picked by architecture) and
//!   the optimizer (`loglinear_host_gpu::train::optim`), with its options in [`args`];
//! * [`eval`]: bits per byte on text, and a quantized model's distance from the f32 one;
//!   [`per_position`]: the loss at each position of the windows;
//! * [`mqar`]: multi-query associative recall data (Zoology's synthetic task) and
//!   `loglinear mqar`, the paper's MQAR sweep on this trainer.
//!
//! Reproducing models/ll-gdn-mcu (TRAINING.md; the defaults are its recipe: windows of 512,
//! batch 32, AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1, lr 2e-3 with 150 warmup steps and a
//! cosine to 2e-4, clip 1.0, seed 20250604, 3,856 steps):
//!
//! ```text
//! loglinear train --config models/ll-gdn-mcu/config.json --data train.txt --val val.txt \
//!     --val-windows 64 --eval-every 250 --save-every 500 --output runs/ll-gdn \
//!     --export runs/ll-gdn-q8_0.gguf
//! loglinear train --data train.txt --val val.txt --val-windows 64 --output runs/ll-gdn \
//!     --steps 5000 --resume            # continue (same settings, more steps)
//! loglinear convert runs/ll-gdn/checkpoint -o ll-gdn-f32.gguf   # or load it in PyTorch
//! ```
//!
//! Each step draws `accum × batch` windows, runs forward and backward per micro-batch into the
//! same gradients (loss scale 1/(batch·seq_len·accum): the mean over all predicted tokens),
//! clips by the global norm and takes one AdamW step, all in one GPU submission. The log
//! (`OUT/train_log.csv`, [`train_log`]) has step, tokens, lr, loss (nats), bits per token,
//! gradient norm before clipping, validation bits per token (on validation steps) and seconds.

pub mod args;
pub mod checkpoint_dir;
pub mod data;
pub mod eval;
pub mod model;
pub mod mqar;
pub mod per_position;
pub mod run;
pub mod schedule;
pub mod train_log;

pub use args::TrainArgs;
