"""Precision names, declared here once and imported everywhere else.

* `PRECISIONS`: the model variants a bundle can hold (`edge_sdk.manifest.VARIANT_FILES`),
  most exact first.
* `BUILD_PRECISIONS`: what `edge-sdk build` and `edge-sdk engine` accept; `best` means every
  variant, with INT8 kept only when it passes the accuracy gate.
* `RUNTIME_PRECISIONS`: what the runtime accepts; `auto` lets the backend choose
  (`edge_sdk.runtime.backends.choose_precision`).

This module imports nothing, so command-line help can be built from it at no cost.
"""
from __future__ import annotations

PRECISIONS = ("fp32", "fp16", "int8")
BEST = "best"
BUILD_PRECISIONS = PRECISIONS + (BEST,)
AUTO = "auto"
RUNTIME_PRECISIONS = (AUTO,) + PRECISIONS

