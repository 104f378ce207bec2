"""Multi-object tracking: ByteTrack's association over a Kalman motion model, numpy only."""
