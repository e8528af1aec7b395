"""The examples in the documentation run and print what the documentation says."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# A block whose examples need a framework says so on the line above its fence, e.g.
# `<!-- doctest: needs torch -->` (an HTML comment: no page shows it).
FENCE = re.compile(r"(?:<!-- doctest: needs ([\w., ]+) -->\n)?```python\n(.*?)```", re.DOTALL)


def _doctest_blocks(page: Path) -> list[tuple[tuple[str, ...], str]]:
    """The page's blocks of examples, each with the frameworks it needs."""
    return [(tuple(name.strip() for name in needs.split(",") if name.strip()), block)
            for needs, block in FENCE.findall(page.read_text()) if ">>>" in block]


def _runs() -> list:
    """Each page once with its blocks that need no framework, and once more with all of them
    where some block needs one (that run skips, naming them, where one is missing)."""
    runs = []
    for page in PAGES:
        blocks = _doctest_blocks(page)
        if not blocks:
            continue
        runs.append(pytest.param(page, (), id=page.name))
        needs = tuple(sorted({name for block_needs, _ in blocks for name in block_needs}))
        if needs:
            runs.append(pytest.param(page, needs, id=f"{page.name}+{'+'.join(needs)}"))
    return runs


@pytest.mark.parametrize("page, needs", _runs())
def test_documentation_examples_run(page, needs):
    pytest.importorskip("numpy")
    for name in needs:
        pytest.importorskip(name)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    globs: dict = {}
    for number, (block_needs, block) in enumerate(_doctest_blocks(page)):
        if not set(block_needs) <= set(needs):
            continue
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


def test_every_public_callable_has_a_signature():
    # help(), IDEs and the API pages read inspect.signature, also of the compiled callables.
    import inspect

    import interop_core
    from interop_core.compat import cuda_core

    missing = []
    for module in (interop_core, cuda_core):
        for name in module.__all__:
            obj = getattr(module, name)
            owners = [obj] if isinstance(obj, type) else []
            if callable(obj) and not isinstance(obj, type):
                owners, members = [], [(name, obj)]
            else:
                members = []
            for cls in owners:
                members += [(f"{name}.{attr}", getattr(cls, attr)) for attr, value in
                            vars(cls).items() if not attr.startswith("_") and callable(value)]
            for label, member in members:
                try:
                    inspect.signature(member)
                except (TypeError, ValueError):
                    missing.append(f"{module.__name__}.{label}")
    assert missing == []
