"""Live certification in the platform: the blind audit of automatic verdicts (labels from people) and
the figures of each kb's re-certified thresholds (``docs/verification.md``, "Live certification in the
platform")."""
