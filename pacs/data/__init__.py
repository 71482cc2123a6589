"""Benchmark sources and their normalisation to one schema."""
