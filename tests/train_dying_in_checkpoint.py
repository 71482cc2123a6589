"""``pacs train`` on a rank that dies, as a killed process does, while writing checkpoint STEP:
after its part of the sharded resume state (optimizers) is on disk, before the checkpoint is published. torchrun
starts it on every rank in place of ``-m pacs.cli train``:
    torchrun --standalone --nproc_per_node 2 tests/train_dying_in_checkpoint.py STEP --config R --out D"""

import os
import sys

from pacs.cli import main
from pacs.runs import checkpoint as ckpt

if __name__ == "__main__":
    step = int(sys.argv.pop(1))
    write = ckpt.save_resume_state

    def dying(staging, optimizers, masters):
        write(staging, optimizers, masters)
        if staging.name == ckpt.staging_dir(staging.parent, step).name:
            os._exit(9)  # no exception handler, no cleanup: as SIGKILL would leave it

    ckpt.save_resume_state = dying
    sys.exit(main(["train", *sys.argv[1:]]))
