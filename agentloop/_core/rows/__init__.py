"""rows: see the package above."""
