"""Live certification: a blind audit of automatic verdicts and thresholds re-certified as labels arrive.

The fusion's accept threshold is certified once on validation facts (:mod:`factloom.verify.certify`).
After deployment the facts drift, so the promise *error among auto-accepted facts <= target* has to be
re-checked on the facts the fusion actually decides. Three parts:

* :mod:`~factloom.verify.audit.sampling` — :class:`AuditSampler` sends a stratified share of the
  automatically decided facts to a blind audit (Neyman-like allocation, deterministic selection);
* :mod:`~factloom.verify.audit.bounds` — the Clopper–Pearson bound on the Kish effective sample of
  weighted labels, post-stratification, and the fixed-sequence test over candidate thresholds;
* :mod:`~factloom.verify.audit.ledger` — :class:`AuditLedger` keeps the evidence of one kb and spends
  the error budget across looks, so the certificate stays valid however often it is looked at.

Everything here is numpy / scipy: no settings, no database.
"""

from __future__ import annotations

from factloom.verify.audit.bounds import (
    LiveCertificate,
    certify_weighted,
    labels_to_certify,
    look_alpha,
    poststratify,
    weighted_lower_bound,
    weighted_upper_bound,
)
from factloom.verify.audit.ledger import AuditLedger
from factloom.verify.audit.sampling import DEFAULT_EDGES, AuditSampler, uniform_hash

__all__ = [
    "AuditSampler", "AuditLedger", "LiveCertificate", "DEFAULT_EDGES", "look_alpha", "weighted_upper_bound",
    "weighted_lower_bound", "certify_weighted", "poststratify", "labels_to_certify", "uniform_hash",
]
