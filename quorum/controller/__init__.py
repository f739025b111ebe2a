"""The active controller's decision logic: pure functions on plain values (no image, no IO)."""
