"""Test-session set-up shared by every test file."""

import regal.tfenv  # noqa: F401  (Keras 2 for spektral; OR-Tools loaded before TensorFlow)
