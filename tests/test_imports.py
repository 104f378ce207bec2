"""`import edge_sdk` and `edge-sdk --help` must not load heavy modules (STYLE rule 1)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ["tensorrt", "pycuda", "cuda", "onnxruntime", "onnx", "cv2", "paho", "jtop", "skimage", "matplotlib"]

PROBES = {
    "import": "import edge_sdk, edge_sdk.detections, edge_sdk.manifest, edge_sdk.targets",
    # The CUDA layer imports its bindings only when a device is opened.
    "cuda": "import edge_sdk.cuda, edge_sdk.cuda.compiler, edge_sdk.cuda.graph, edge_sdk.cuda.preprocess",
    # The runtime config imports the backend names; the backends themselves load on selection.
    "config": "import edge_sdk.precision, edge_sdk.runtime.config, edge_sdk.runtime.backends",
    "help": (
        "import sys\n"
        "from edge_sdk.cli import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
    ),
}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_no_heavy_module_is_imported(probe: str) -> None:
    code = PROBES[probe] + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == [], f"{probe} loaded heavy modules: {heavy}"


def test_every_command_help_is_light() -> None:
    """`edge-sdk <command> --help` for every registered command stays light too."""
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from typer.main import get_command\n"
        "from edge_sdk.cli import app\n"
        "names = sorted(get_command(app).commands)\n"
        "for n in names:\n"
        "    r = CliRunner().invoke(app, [n, '--help'])\n"
        "    assert r.exit_code == 0, (n, r.output)\n"
        "print(json.dumps([names, sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names, loaded = json.loads(out.strip().splitlines()[-1])
    assert "targets" in names
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == [], f"command --help loaded heavy modules: {heavy}"


def test_cli_modules_keep_annotations_evaluable_by_typer() -> None:
    """On Python 3.8, Typer reads `Annotated[...]` option names only from evaluated annotations.

    With `from __future__ import annotations` the names silently fall back to ones derived
    from the parameter (`--json` becomes `--as-json`), so CLI modules that use Annotated must
    not postpone annotations.
    """
    import re
    from pathlib import Path

    import edge_sdk.cli

    offenders = []
    for path in sorted(Path(edge_sdk.cli.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r":\s*Annotated\[", text) and "from __future__ import annotations" in text:
            offenders.append(path.name)
    assert offenders == [], f"CLI modules mixing Annotated with postponed annotations: {offenders}"
