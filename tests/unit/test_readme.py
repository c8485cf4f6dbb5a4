"""The README's Python example runs as written (on a memory store instead of S3)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs() -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert block is not None
    code = block.group(1)
    code = re.sub(
        r'open_store\(\s*"s3://bucket/run/payloads".*?\},?\s*\)',
        'open_store("memory://readme/run/payloads")',
        code,
        flags=re.DOTALL,
    )
    assert "memory://readme" in code
    namespace: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), namespace)
    mask = namespace["mask"]
    assert isinstance(mask, np.ndarray)
    assert mask.tolist() == [[7, -1, -1], [8, 9, 10], [-1, -1, -1]]
