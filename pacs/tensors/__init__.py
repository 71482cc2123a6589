"""The tensors of a training update: a step's rows (``batch``), rows packed into one sequence (``varlen``), log-probs
and entropy from the LM head in chunks (``logprobs``), the fused CUDA kernels (``kernels``). The trainer
(``pacs.train``) and the update benchmarks use them.

Imports of ``pacs`` only ``pacs.rollout`` (a completion's fields)."""
