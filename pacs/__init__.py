"""pacs: reproduction of PACS (arXiv 2509.02522) with PPO and GRPO baselines."""

__version__ = "0.1.0"
