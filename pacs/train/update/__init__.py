"""The update: the models a run trains, loaded, spread over ranks and checkpointed (``models``), micro-batches by
prompts or tokens (``packing``), and the passes and optimizer steps over them (``minibatch``).

May import ``settings``, ``ranks`` and ``state``."""
