"""Compilation: jit, the ordered pass pipeline, pattern rewrites and elementwise clustering."""
