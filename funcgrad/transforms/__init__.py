"""Transformations: interpreters over expressions (ad, batching, custom rules, jacobians, pmap, loop AD)."""
