"""The CPU backend: numpy eager execution, fused numba CPU kernels and compiled plans."""
