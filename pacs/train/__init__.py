"""Training: one loop for every objective, data parallel, checkpoints with exact resume."""
