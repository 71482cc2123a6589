"""Ranks and their devices: process groups, DDP and FSDP2 (``distributed``), memory per phase of a step
(``memory``), the micro-batch sizes a device fits (``sizes``).

May import ``settings``."""
