"""Benchmark the preprocessing probe of `edge-sdk build` on the default model: its wall time, the
time of one plain FP32 pass (preprocess + ONNX Runtime + decode) over the same images, and of one
FP32 inference, run alternately in one process so that load on the machine hits them alike.
The probe's cost is printed as a multiple of one FP32 inference.

    python bench/bench_probe.py [--rounds 5] [--color RGB]

The probe uses the images the default build gives it (up to 8 search images of the default
calibration folder); --color BGR times it on the spec forced to the wrong channel order and prints
its warning.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--color", choices=("RGB", "BGR"), default="RGB")
    args = parser.parse_args()

    from edge_sdk.builder import graph
    from edge_sdk.builder.default_model import DEFAULT_MODEL, ensure_model
    from edge_sdk.builder.evaluate import OnnxRuntimeRunner
    from edge_sdk.builder.pipeline import default_calib_dir, list_images, split_images
    from edge_sdk.builder.probe import candidates, pick_images, probe, runs
    from edge_sdk.decoders import make_decoder
    from edge_sdk.preprocess import InputSpec, Preprocessor, load_image

    spec = InputSpec.from_dict(dict(DEFAULT_MODEL.input_spec.to_dict(), color=args.color))
    model, _ = graph.optimize(graph.upgrade_opset(graph.fix_input(graph.model_from_path(ensure_model()), spec.name, spec.shape)))
    paths = pick_images(split_images(list_images(default_calib_dir()), 0.25, 4, 8).search)
    decoder = make_decoder(DEFAULT_MODEL.decoder, spec)

    def plain_pass() -> None:
        pre = Preprocessor(spec, batch=1)
        with OnnxRuntimeRunner(model) as runner:
            for p in paths:
                tensor, transform = pre(load_image(str(p)))
                decoder(runner.infer({spec.name: tensor}), [transform])

    single = OnnxRuntimeRunner(model)
    single.activate()
    feed = {spec.name: Preprocessor(spec, batch=1)(load_image(str(paths[0])))[0].copy()}
    single.infer(feed)  # warm-up

    def one_inference_s() -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            single.infer(feed)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    n_runs = runs(len(paths)) * len(candidates(spec))
    print(f"default model {DEFAULT_MODEL.name} {spec.shape}, configured {spec.color}; {len(paths)} images, "
          f"{len(candidates(spec))} candidates, {n_runs} model runs per probe; {args.rounds} rounds")
    probe_s, plain_s, infer_s = [], [], []
    result = None
    for _ in range(args.rounds):
        infer_s.append(one_inference_s())
        t0 = time.perf_counter()
        plain_pass()
        plain_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = probe(model, spec, DEFAULT_MODEL.decoder, paths)
        probe_s.append(time.perf_counter() - t0)
        infer_s.append(one_inference_s())
    assert result is not None
    p, q, r = statistics.median(probe_s), statistics.median(plain_s), statistics.median(infer_s)
    print(f"probe: median {p:.2f} s; one FP32 pass over the same {len(paths)} images: median {q:.2f} s ({p / q:.1f}x); "
          f"one FP32 inference: median {r * 1e3:.1f} ms (the probe takes {p / r:.0f} of them)")
    print(f"verdict: {result.verdict}" + (f"; warning: {result.warning()}" if result.warning() else ""))


if __name__ == "__main__":
    main()
