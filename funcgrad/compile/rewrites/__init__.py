"""Pattern rewrites run by jit's pass pipeline (composed idioms -> fused primitives)."""
