"""funcgrad.example_libraries: JAX's example libraries (stax layers, optimizers) on funcgrad.

As in JAX, the submodules are imported by name: ``from funcgrad.example_libraries import stax,
optimizers``.
"""
