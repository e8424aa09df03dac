"""The README's Python examples run as written, so they cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from remat.graph.reference import reference_graphs_available

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_the_readme_shows_the_pytorch_api():
    code = "\n".join(BLOCKS)
    assert "remat.torch.optimize(" in code and ".step(" in code and "attention_mask" in code


def test_readme_examples_run(tmp_path, monkeypatch, capsys):
    """All blocks run in order in one namespace, as a reader pastes them (the second reuses the first's imports)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, code in enumerate(BLOCKS):
        if "load_reference_graph" in code and not reference_graphs_available():
            continue  # needs the paper's graphs (REMAT_GRAPHS_DIR or ../shared/data/graphs); the others still run
        exec(compile(code, f"README.md, python block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "the least budget that works" in out and "predicted peak" in out
    assert (tmp_path / "schedule.json").is_file()
