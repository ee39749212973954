"""Shared test set-up: a seeded numpy RNG per test and hypothesis profiles ("ci" when CI=true)."""

import os

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=40, deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


@pytest.fixture(autouse=True)
def _seed_numpy():
    """Seeds numpy's legacy global RNG so that tests using np.random.* are reproducible."""
    np.random.seed(0)


@pytest.fixture
def rng():
    """A fresh, seeded numpy Generator for the test."""
    return np.random.default_rng(0)
