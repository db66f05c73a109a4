//! Backward of the Log-Linear Mamba-2 chunkwise operator (spec §7.4). Work in progress.
