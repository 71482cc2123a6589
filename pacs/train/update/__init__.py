"""The update: the models a run trains, loaded, spread over ranks and checkpointed (``models``), the micro-batch
sizes a device fits (``sizes``), micro-batches by prompts or tokens (``packing``), and the passes and optimizer
steps over them (``minibatch``).

May import ``settings``."""
