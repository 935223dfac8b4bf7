"""Cross-verification: independent verifiers and the rule that fuses them into one verdict.

Verifiers see plain values (claims and the graph facts they touch) and never a database session,
so each can be tested on hand-made cases and new ones slot in beside the existing ones.
"""

from __future__ import annotations

from factloom.verify.base import Claim, Verdict, Verifier, VerifierResult
from factloom.verify.certify import Certificate, certify_accept_threshold
from factloom.verify.consistency import ConsistencyVerifier
from factloom.verify.fusion import VerdictRule

__all__ = [
    "Certificate", "Claim", "ConsistencyVerifier", "Verdict", "VerdictRule", "Verifier", "VerifierResult",
    "certify_accept_threshold",
]
