"""The packages a pacs process leaves out of its imports: scikit-learn and SciPy.

transformers imports both whenever they are installed, at every start: scikit-learn for assisted decoding's
candidate confidence, SciPy for object detection's loss; pacs uses neither. Here they are installed because
sentence-transformers (v2's diversity embedder) requires them, and importing them cost each process that loads a
model 1.3 of its 4.9 CPU seconds (``import transformers.models.qwen2.modeling_qwen2``). ``leave_out`` (the CLI's
first step) marks them absent, as Python's ``sys.modules`` convention does (an entry of None: ``find_spec`` answers
None and an import raises ModuleNotFoundError); ``take_back`` undoes it before sentence-transformers is imported.
Where one was imported before ``leave_out`` (a test worker), it stays."""

import sys

LEFT_OUT = ("sklearn", "scipy")


def leave_out() -> None:
    for name in LEFT_OUT:
        sys.modules.setdefault(name, None)


def take_back() -> None:
    for name in LEFT_OUT:
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
