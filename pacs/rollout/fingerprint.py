"""An exact fingerprint of a tensor's bits: the check that a rollout engine holds the weights pushed into it.

``fingerprint(t)`` is a fixed pseudo-random projection of the tensor's raw bits, computed in integers:
its elements are read as 16-bit words u_k (a bfloat16 element is one word, a float32 element two), and

    F(t) = Σ_c W_c · Σ_k c_k · u_{c,k}    (exactly, in Python integers)

over chunks c of 2^24 words, with c_k ∈ [1, 2^16) a fixed hash of k and W_c a fixed hash of c. Integer sums
do not depend on the order in which they are added, so the trainer and the engine get the same number from
the same bits on any device and with any kernel, and any change of a single bit changes it (c_k is odd, W_c
too). Two different tensors collide only if their differences cancel in the weighted sum, which weights
that are never pushed, half pushed or pushed stale do not do.
"""

import hashlib

import torch
from torch import Tensor

CHUNK = 1 << 24  # 16-bit words per chunk: each chunk's sum stays below 2^56 in int64
_HASH = 0x9E3779B1  # Knuth's multiplicative hash constant (2^32 / golden ratio)
_coefficients: dict[torch.device, Tensor] = {}


def _chunk_coefficients(device: torch.device, length: int) -> Tensor:
    """c_k for k < length (at most CHUNK): odd, below 2^16, on ``device``; kept for the next call (64 MB at most)."""
    if device not in _coefficients or len(_coefficients[device]) < length:
        k = torch.arange(length, dtype=torch.int64, device=device)
        _coefficients[device] = ((((k * _HASH) & 0xFFFFFFFF) >> 16) | 1).to(torch.int32)
    return _coefficients[device]


def fingerprint(t: Tensor) -> int:
    """The tensor's fingerprint (module docstring); its shape is not part of it: compare shapes apart."""
    if t.element_size() % 2:
        raise ValueError(f"fingerprint: {t.dtype} elements are not whole 16-bit words")
    words = t.detach().contiguous().view(-1).view(torch.int16)
    coefficients = _chunk_coefficients(words.device, min(words.numel(), CHUNK))
    total = 0
    for c, start in enumerate(range(0, words.numel(), CHUNK)):
        u = words[start : start + CHUNK].to(torch.int64) & 0xFFFF
        chunk_sum = int((u * coefficients[: u.numel()]).sum())
        total += ((c * _HASH) % (1 << 31) * 2 + 1) * chunk_sum
    return total


def weights_fingerprint(fingerprints: dict[str, int]) -> str:
    """One fingerprint of a model's weights from its tensors' (name -> ``fingerprint``): a digest of every
    name and value, in name order."""
    digest = hashlib.sha256()
    for name in sorted(fingerprints):
        digest.update(f"{name}={fingerprints[name]};".encode())
    return digest.hexdigest()[:16]
