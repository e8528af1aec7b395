"""The examples in the documentation run and print what the documentation says."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _doctest_blocks(page: Path) -> list[str]:
    return [block for block in FENCE.findall(page.read_text()) if ">>>" in block]


@pytest.mark.parametrize("page", [p for p in PAGES if _doctest_blocks(p)], ids=lambda p: p.name)
def test_documentation_examples_run(page):
    pytest.importorskip("numpy")
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    globs: dict = {}
    for number, block in enumerate(_doctest_blocks(page)):
        test = parser.get_doctest(block, globs, f"{page.name}[{number}]", str(page), 0)
        runner.run(test, clear_globs=False)
        globs.update(test.globs)  # each DocTest copies its globals; carry names forward
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} example(s) in {page.name} failed (see output)"


def test_readme_tour_runs():
    pytest.importorskip("torch")
    block = re.search(r"## A 10-line tour\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(),
                      re.DOTALL)
    assert block, "README lost its tour"
    exec(compile(block.group(1), "README tour", "exec"), {})


def test_the_changelog_has_an_unreleased_section_and_one_for_the_package_version():
    import interop_core

    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert interop_core.__version__ in headings[1:], headings
