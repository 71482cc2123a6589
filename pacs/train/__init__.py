"""Training: one loop for every objective (``loop``: the algorithm) and the job that runs it (``launch``), over
rooms that each hold one part of it and import only the rooms below them: ``settings``, then ``update``, then
``sampling``. Beneath them stand the package's ``pacs.tensors``, ``pacs.ranks`` and ``pacs.runs``."""
