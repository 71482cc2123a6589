"""The tensors of an update: a step's rows (``batch``), rows packed into one sequence (``varlen``), log-probs
and entropy from the LM head in chunks (``logprobs``), the fused CUDA kernels (``kernels``).

Imports no other room of ``pacs.train``."""
