"""Helpers for tests, demos and benchmarks: not on any job's path."""
