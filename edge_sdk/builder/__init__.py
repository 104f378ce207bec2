"""Host-side builder: prepares models, calibration data and bundles for a target."""
