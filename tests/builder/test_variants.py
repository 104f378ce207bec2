"""The precision the bundle recommends, for each --precision and INT8 gate outcome."""
from __future__ import annotations

from typing import Optional

import pytest

from edge_sdk.builder.variants import recommended_precision

pytestmark = pytest.mark.host


@pytest.mark.parametrize(
    "requested, int8_passed, recommended",
    [
        ("fp32", None, "fp32"),
        ("fp16", None, "fp16"),
        ("int8", True, "int8"),
        ("int8", False, "int8"),  # asked for INT8 and kept it with --allow-accuracy-loss
        ("best", True, "int8"),
        ("best", False, "fp16"),  # best: INT8 only when it passes the gate
    ],
)
def test_recommended_precision(requested: str, int8_passed: Optional[bool], recommended: str) -> None:
    assert recommended_precision(requested, int8_passed) == recommended
