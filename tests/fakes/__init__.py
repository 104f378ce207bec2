"""Fakes of hardware libraries (TensorRT, CUDA) for tests. They live here and never in edge_sdk/."""
