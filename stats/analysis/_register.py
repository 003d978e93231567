"""Import every analysis module so that its analyses are registered (order matters:
:func:`stats.analysis.run` computes them in registration order)."""
from . import adjusted, calibration, crs, detection, metadata  # noqa: F401
