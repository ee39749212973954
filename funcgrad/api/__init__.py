"""Top-level API functions that are not transformations: devices, placement, shapes, config states."""
