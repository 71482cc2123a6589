"""``pacs train`` with deterministic GPU kernels, for the GPU suite's bitwise-resume tests: deterministic
algorithms where torch has them, cuBLAS with a fixed workspace, and the math attention kernel (the fused
kernels' backward passes accumulate in an order that changes from run to run). Run it as
    python tests/train_deterministic.py --config R --out D
or under torchrun in place of ``-m pacs.cli train``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts: before any matmul
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    from pacs.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
