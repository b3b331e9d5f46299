"""docs/python.md's examples run as written: every ```python block, in order, in one namespace,
against the test cluster."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "python.md"


def test_the_worked_example_in_the_docs_runs(cluster, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 8, "the worked example lost its code blocks"
    scope = {"ENDPOINTS": cluster.endpoints, "NS": "py/docs-example"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), scope)
    printed = capsys.readouterr().out
    assert "Alice prefers a light theme" in printed
    assert "FAILED_PRECONDITION" in printed
