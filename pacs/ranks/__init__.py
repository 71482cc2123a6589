"""Ranks and their devices: process groups, DDP and FSDP2 (``distributed``), and memory per phase of a step,
this rank's and the largest of any rank's (``memory``). The trainer and the benchmarks use them.

Imports of ``pacs`` only ``pacs.tensors`` (a batch's padding) and ``pacs.plan.memory`` (the phases). The CUDA
allocator's settings for a training job (``allocator``) import nothing, for the launcher to set before torch starts."""
