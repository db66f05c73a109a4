//! Backward of the Log-Linear Gated DeltaNet chunkwise operator (spec §7.4). Work in progress.
