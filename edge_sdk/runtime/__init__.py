"""The on-device runtime: sources, preprocessing, backends, decoding, merging, sinks."""
