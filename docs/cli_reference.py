"""Write the command-line reference of docs/cli.md from the argument parser.

Usage, from the repository root (with this tree importable)::

    python docs/cli_reference.py          # rewrite the block between the cli-reference markers
    python docs/cli_reference.py --check  # exit 1 if docs/cli.md is not what the parser gives
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
MARKERS = re.compile(r"(<!-- cli-reference:start -->\n).*?(<!-- cli-reference:end -->)", re.S)


def expected_page() -> str:
    """docs/cli.md with its reference block generated from the parser."""
    import importlib.util

    if importlib.util.find_spec("interop_core") is None:
        sys.path.insert(0, str(ROOT))       # this checkout, built in place, not installed
    from interop_core.__main__ import reference_markdown

    text = PAGE.read_text()
    if not MARKERS.search(text):
        raise SystemExit(f"{PAGE}: markers <!-- cli-reference:start/end --> not found")
    return MARKERS.sub(lambda m: m.group(1) + reference_markdown() + m.group(2), text)


def main(argv: list[str]) -> int:
    page = expected_page()
    if "--check" in argv:
        if PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} differs from the parser: run "
                  "python docs/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
