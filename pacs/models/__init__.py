"""Models built locally: tiny Qwen2 policies for CPU tests and the tiny pipeline."""
