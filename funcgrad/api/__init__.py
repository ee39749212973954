"""Top-level API that is not a transformation: devices, placement, shapes, pmap, config states."""
