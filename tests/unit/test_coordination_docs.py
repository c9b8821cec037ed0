"""docs/coordinations.md stays true: every example runs and prints the output shown under it.

The page is a sequence of ```python blocks, each followed by a ```text block with its output;
the blocks run in order in one namespace. To refresh the outputs after changing an example:
``python tests/unit/test_coordination_docs.py --write``.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "coordinations.md"
EXAMPLE = re.compile(r"```python\n(?P<code>.*?)```\n\n```text\n(?P<output>.*?)```", re.DOTALL)


def run_examples(text: str) -> list[tuple[re.Match[str], str]]:
    """Run each example of the page; return it with what it printed."""
    # A registered module, because dataclasses look their module up in sys.modules.
    module = types.ModuleType("docs_coordinations")
    sys.modules[module.__name__] = module
    ran = []
    try:
        for match in EXAMPLE.finditer(text):
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(match["code"], str(PAGE), "exec"), module.__dict__)  # noqa: S102
            ran.append((match, printed.getvalue()))
    finally:
        del sys.modules[module.__name__]
    return ran


def test_every_example_prints_the_output_shown_under_it() -> None:
    text = PAGE.read_text()
    ran = run_examples(text)
    assert len(ran) >= 8
    for match, printed in ran:
        assert printed == match["output"], match["code"]


def test_the_page_shows_no_python_block_without_its_output() -> None:
    text = PAGE.read_text()
    assert text.count("```python") == len(EXAMPLE.findall(text))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    source = PAGE.read_text()
    pieces, end = [], 0
    for found, output in run_examples(source):
        pieces += [source[end : found.start("output")], output]
        end = found.end("output")
    PAGE.write_text("".join(pieces) + source[end:])
