"""What a run is asked to do: its configuration, every key typed (``config``), and its prompts (``prompts``).

Imports no other room of ``pacs.train``."""
