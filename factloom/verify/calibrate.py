"""Where :class:`~factloom.model.calibrate.Calibrator` lived before it moved beside the scorer.

Scorer and fusion artefacts saved before the move name this module in their pickles; it stays so
that they still load. New code imports :mod:`factloom.model.calibrate`.
"""

from factloom.model.calibrate import Calibrator, expected_calibration_error, operating_point

__all__ = ["Calibrator", "expected_calibration_error", "operating_point"]
