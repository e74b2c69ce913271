"""_loop: see the package above."""
