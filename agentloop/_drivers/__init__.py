"""_drivers: see the package above."""
