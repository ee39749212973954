"""Every public name of 49b0530 (before the layout moves) stays importable where it was."""
import importlib
import json
import pathlib

import pytest

NAMES = json.loads((pathlib.Path(__file__).parent / "data" / "public_names.json").read_text())


@pytest.mark.parametrize("module", sorted(NAMES))
def test_public_names_importable(module):
    mod = importlib.import_module(module)
    missing = [n for n in NAMES[module] if not hasattr(mod, n)]
    assert not missing, f"{module} lost public names: {missing}"
