"""The README's support matrix is the generated one (python -m hopattn), not a hand-edited copy."""

import pathlib
import re

import hopattn

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_support_matrix_is_generated():
    text = README.read_text()
    m = re.search(r"<!-- support-matrix:begin -->\n(.*?)\n<!-- support-matrix:end -->", text, re.S)
    assert m, "README.md lost its support-matrix markers"
    assert m.group(1).strip() == hopattn.format_support_matrix().strip(), (
        "README.md's support matrix is stale: paste the output of "
        "`python -c 'import hopattn; print(hopattn.format_support_matrix())'` between the markers"
    )
