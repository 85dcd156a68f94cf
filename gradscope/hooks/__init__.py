"""Module-level hook machinery built on autograd nodes."""
