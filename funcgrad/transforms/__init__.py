"""Transformations: interpreters over expressions (ad, batching, custom rules, jacobians, loop AD)."""
