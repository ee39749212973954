"""The documentation's examples and links: README.md, docs/*.md and funcgrad/cuda/README.md.

Every ```python block runs as a script named example.py in a fresh directory, in a process of
its own with the default device pinned to the CPU and the default 64-bit mode (the pages show
what the CPU backend prints); when a plain ``` block follows it, the script must print exactly
that. A comment on the line before a block changes how it runs:

    <!-- docs-test: cwd=examples stdin -->          run from examples/, the source on stdin
    <!-- docs-test: env FUNCGRAD_NUM_CPU_DEVICES=4 -->   extra environment variables

Relative links must name files that exist, and #anchors headings of the page they point to.
The README's two commands must stay the ones CI runs (.ci/run).
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "funcgrad" / "cuda" / "README.md"]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
_DIRECTIVE = re.compile(r"<!-- docs-test: (.*?) -->\n$")

# runs the example with the CPU as the default device, under the file name the page shows
_RUNNER = """
import sys
import funcgrad
funcgrad.config.update("default_device", "cpu")
name, src = sys.argv[1], sys.stdin.read()
sys.argv = [name]
exec(compile(src, name, "exec"), {"__name__": "__main__", "__file__": name})
"""


def _examples():
    out = []
    for page in PAGES:
        text = page.read_text()
        blocks = list(_FENCE.finditer(text))
        for i, m in enumerate(blocks):
            if m.group(1) != "python":
                continue
            expected = None
            if i + 1 < len(blocks):
                nxt = blocks[i + 1]
                between = text[m.end():nxt.start()]
                if nxt.group(1) == "" and not between.strip():
                    expected = nxt.group(2)
            d = _DIRECTIVE.search(text[:m.start()])
            directive = d.group(1) if d and d.end() == m.start() else ""
            line = text.count("\n", 0, m.start()) + 1
            rel = page.relative_to(ROOT).as_posix()
            out.append(pytest.param(m.group(2), expected, directive, id=f"{rel}:{line}"))
    return out


EXAMPLES = _examples()


def test_the_pages_have_examples():
    ids = [p.id for p in EXAMPLES]
    for page in ("README.md", "docs/api.md"):
        assert sum(i.startswith(page + ":") for i in ids) >= 4, page


@pytest.mark.parametrize("source,expected,directive", EXAMPLES)
def test_example_prints_what_the_page_shows(source, expected, directive, tmp_path):
    # the pages show funcgrad's default mode (64-bit types off, as in JAX), not the suite's
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cwd, name = tmp_path, "example.py"
    for word in directive.split():
        if word == "cwd=examples":
            cwd = ROOT / "examples"
        elif word == "stdin":
            name = "<stdin>"
        elif "=" in word and word.split("=")[0].isupper():
            key, _, value = word.partition("=")
            env[key] = value
        elif word != "env":
            raise AssertionError(f"unknown docs-test directive {word!r}")
    res = subprocess.run([sys.executable, "-c", _RUNNER, name], input=source, cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    printed = res.stdout + res.stderr
    assert res.returncode == 0, printed
    if expected is not None:
        assert printed == expected


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set:
    text = _FENCE.sub("", page.read_text())
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_point_to_files_and_headings(page):
    text = _FENCE.sub("", page.read_text())
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md"
                                 and anchor not in _anchors(dest)):
            bad.append(target)
    assert not bad, f"{page.name}: broken links {bad}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_named_files_exist(page):
    """Paths such as `funcgrad/compile/jit.py` or tests/test_jit.py name files of the tree."""
    text = page.read_text()
    named = set(re.findall(r"(?<![\w/.])((?:funcgrad|tests|benchmarks|examples|tools|docs)"
                           r"/[\w/]+\.(?:py|md))", text))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_readme_commands_are_the_ones_ci_runs():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    assert "pip install -e '.[examples]' && python examples/train_mlp.py" in readme
    assert "pip install -e '.[test]' && NUMBA_ENABLE_CUDASIM=1 python -m pytest" in readme
    assert "pip install -e '.[test]'" in ci and "NUMBA_ENABLE_CUDASIM=1 python -m pytest" in ci


def test_no_issue_numbers_in_the_pages():
    for page in PAGES:
        assert not re.search(r"\bissue \d+", page.read_text(), re.IGNORECASE), page.name
