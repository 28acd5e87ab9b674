"""The pieces of `loadtest/bench.py`: one module per scenario family, plus `common`."""
