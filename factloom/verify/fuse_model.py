"""Learned, calibrated fusion of verifier outputs with certified three-way thresholds.

Each claim's verifier results become one feature row: per configured verifier the logit of its
probability and an abstain indicator, plus chosen numeric ``details`` (for example the plausibility
scorer's filtered ranks). A classifier (gradient boosting, or logistic regression) is fitted on one
part of the labelled validation facts; the other part — never seen by the classifier — fits an
isotonic (or Platt) calibration and then certifies the thresholds with :mod:`factloom.verify.certify`:

* accept: the lowest threshold whose one-sided 95 % Clopper–Pearson bound on the error among
  auto-accepted facts is within ``target`` (default 0.0007); none when it cannot be certified;
* reject: the same test on the mirrored problem (true facts among auto-rejected ones within
  ``reject_target``, default ``target``).

Because calibration and certification use facts the classifier never saw, the bound is a finite-sample
guarantee for new facts from the same distribution. Everything abstaining means review.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from factloom.verify.base import Verdict, VerifierResult
from factloom.verify.calibrate import Calibrator, expected_calibration_error, operating_point
from factloom.verify.certify import Certificate, certify_accept_threshold
from factloom.verify.fusion import Fused

__all__ = ["LearnedFusion", "FUSION_FORMAT"]

FUSION_FORMAT = "factloom-fusion-1"
Rows = Sequence[Sequence[VerifierResult]]
_EPS = 1e-4


class LearnedFusion:
    """Args:
        verifiers: the verifier names whose probabilities are features, in a fixed order.
        details: per verifier name, numeric ``VerifierResult.details`` keys used as extra features.
        method: ``"gbdt"`` (histogram gradient boosting; handles abstentions as missing values)
            or ``"logistic"``.
        calibration: ``"isotonic"`` or ``"platt"``, fitted on the calibration part.
        target: allowed error among auto-accepted facts; ``reject_target`` the share of true facts
            allowed among auto-rejected ones (default: ``target``).
        alpha: one minus the confidence of the certificate.
    """

    name = "fusion"

    def __init__(self, verifiers: Sequence[str], *, details: Mapping[str, Sequence[str]] | None = None,
                 method: str = "gbdt", calibration: str = "isotonic", target: float = 0.0007,
                 reject_target: float | None = None, alpha: float = 0.05, seed: int = 0) -> None:
        if method not in ("gbdt", "logistic"):
            raise ValueError(f"unknown fusion method {method!r}; use 'gbdt' or 'logistic'")
        if not verifiers:
            raise ValueError("a fusion needs at least one verifier")
        self.verifiers = list(verifiers)
        self.details = {k: list(v) for k, v in (details or {}).items()}
        self.method, self.calibration, self.alpha, self.seed = method, calibration, alpha, seed
        self.target = target
        self.reject_target = target if reject_target is None else reject_target
        self.model: Any = None
        self.calibrator: Calibrator | None = None
        self.accept: float | None = None
        self.reject: float | None = None
        self.certificate: Certificate | None = None
        self.reject_certificate: Certificate | None = None
        self.metrics: dict[str, Any] = {}
        self.version = "untrained"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(verifiers={self.verifiers}, method={self.method!r}, "
                f"accept={self.accept}, reject={self.reject}, version={self.version!r})")

    @property
    def feature_names(self) -> list[str]:
        names = [f"{v}:{k}" for v in self.verifiers for k in ("logit", "abstain")]
        return names + [f"{v}:{k}" for v, keys in self.details.items() for k in keys]

    def featurize(self, rows: Rows) -> np.ndarray:
        """(N, F) features; missing values are NaN for gradient boosting, 0 for logistic regression."""
        out = np.full((len(rows), len(self.feature_names)), np.nan)
        for i, results in enumerate(rows):
            by = {r.verifier: r for r in results}
            for j, v in enumerate(self.verifiers):
                r = by.get(v)
                if r is None or r.probability is None:
                    out[i, 2 * j + 1] = 1.0
                    continue
                p = min(max(float(r.probability), _EPS), 1 - _EPS)
                out[i, 2 * j], out[i, 2 * j + 1] = np.log(p / (1 - p)), 0.0
            col = 2 * len(self.verifiers)
            for v, keys in self.details.items():
                r = by.get(v)
                for k in keys:
                    value = r.details.get(k) if r is not None and r.probability is not None else None
                    if isinstance(value, int | float):
                        out[i, col] = float(value)
                    col += 1
        return out if self.method == "gbdt" else np.nan_to_num(out, nan=0.0)

    def _new_model(self) -> Any:
        if self.method == "gbdt":
            return HistGradientBoostingClassifier(max_iter=300, learning_rate=0.04, max_leaf_nodes=15,
                                                  min_samples_leaf=20, l2_regularization=1.0, random_state=self.seed)
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))

    def _raw(self, x: np.ndarray) -> np.ndarray:
        """The classifier's log-odds: Platt scaling of a logit stays exact for a well-specified model."""
        p = np.clip(np.asarray(self.model.predict_proba(x)[:, 1], dtype=np.float64), 1e-9, 1 - 1e-9)
        return np.asarray(np.log(p / (1 - p)))

    def fit(self, rows: Rows, labels: Sequence[int], *, calib_rows: Rows | None = None,
            calib_labels: Sequence[int] | None = None, holdout: float = 0.5) -> LearnedFusion:
        """Fit the classifier, then calibrate and certify on data it did not see.

        Without ``calib_rows`` a stratified ``holdout`` share of ``rows`` is set aside for calibration
        and certification.
        """
        y = np.asarray(labels, dtype=np.int64)
        if len(y) != len(rows):
            raise ValueError(f"{len(rows)} rows but {len(y)} labels")
        if calib_rows is None:
            if not 0.0 < holdout < 1.0:
                raise ValueError(f"holdout must be in (0, 1), got {holdout}")
            rng = np.random.default_rng(self.seed)
            cal = np.zeros(len(y), dtype=bool)
            for cls in (0, 1):
                idx = np.flatnonzero(y == cls)
                cal[rng.choice(idx, size=int(round(holdout * len(idx))), replace=False)] = True
            calib_rows = [rows[int(i)] for i in np.flatnonzero(cal)]
            calib_labels = y[cal].tolist()
            rows = [rows[int(i)] for i in np.flatnonzero(~cal)]
            y = y[~cal]
        yc = np.asarray(calib_labels, dtype=np.int64)
        if len(yc) != len(calib_rows):
            raise ValueError(f"{len(calib_rows)} calibration rows but {len(yc)} labels")
        for what, ys in (("fit", y), ("calibration", yc)):
            if len(np.unique(ys)) < 2:
                raise ValueError(f"the {what} facts need both true and false ones")
        self.model = self._new_model().fit(self.featurize(rows), y)
        raw = self._raw(self.featurize(calib_rows))
        self.calibrator = Calibrator(self.calibration).fit(raw.tolist(), yc.tolist())
        p = self.calibrator.predict(raw.tolist())
        self.choose_thresholds(p.tolist(), yc.tolist())
        point = operating_point(p.tolist(), yc.tolist(), accept=self.accept, reject=self.reject)
        self.metrics = {
            "fit_facts": int(len(y)), "calibration_facts": int(len(yc)),
            "calibration_accuracy": float(((p >= 0.5) == yc).mean()),
            "calibration_ece": expected_calibration_error(p.tolist(), yc.tolist()),
            **{f"calibration_{k}": v for k, v in point.items()},
        }
        self.version = self._version()
        return self

    def choose_thresholds(self, probabilities: Sequence[float], labels: Sequence[int], *,
                          target: float | None = None, reject_target: float | None = None) -> None:
        """Certify accept / reject thresholds on calibrated held-out probabilities (sets them on self)."""
        if target is not None:
            self.target = target
            self.reject_target = target if reject_target is None else reject_target
        elif reject_target is not None:
            self.reject_target = reject_target
        p = np.asarray(probabilities, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        self.certificate = certify_accept_threshold(p.tolist(), y.tolist(), target=self.target, alpha=self.alpha)
        self.reject_certificate = certify_accept_threshold((1 - p).tolist(), (1 - y).tolist(),
                                                           target=self.reject_target, alpha=self.alpha)
        self.accept = self.certificate.threshold
        rt = self.reject_certificate.threshold
        self.reject = None if rt is None else 1.0 - rt
        if self.accept is not None and self.reject is not None and self.reject >= self.accept:
            self.reject = None  # cannot happen with small targets; never let the two overlap
        self.version = self._version()

    def predict_proba(self, rows: Rows) -> np.ndarray:
        """Calibrated probability of truth per row (NaN where every verifier abstained)."""
        if self.model is None or self.calibrator is None:
            raise RuntimeError("LearnedFusion.predict_proba before fit or load")
        if not rows:
            return np.zeros(0)
        x = self.featurize(rows)
        p = self.calibrator.predict(self._raw(x).tolist())
        silent = np.array([all(r.probability is None for r in rs) for rs in rows])
        p[silent] = np.nan
        return p

    def fuse(self, results: Sequence[VerifierResult]) -> Fused:
        return self.fuse_many([results])[0]

    def fuse_many(self, rows: Rows) -> list[Fused]:
        """One :class:`Fused` per claim; one batched model call."""
        probs = self.predict_proba(rows)
        out = []
        for results, p in zip(rows, probs, strict=True):
            voting = [r for r in results if r.probability is not None]
            if not voting:
                out.append(Fused(None, Verdict.review, "every verifier abstained"))
                continue
            worst = min(voting, key=lambda r: r.probability or 0.0)
            doubt = f"weakest {worst.verifier}: {worst.explanation}"
            if self.accept is not None and p >= self.accept:
                out.append(Fused(float(p), Verdict.accept,
                                 f"fused p {p:.4f} >= accept {self.accept:.4f} (certified {self.target:g})"))
            elif self.reject is not None and p <= self.reject:
                out.append(Fused(float(p), Verdict.reject, f"fused p {p:.4f} <= reject {self.reject:.4f}; {doubt}"))
            else:
                out.append(Fused(float(p), Verdict.review, f"fused p {p:.4f} needs review; {doubt}"))
        return out

    def meta(self) -> dict[str, Any]:
        return {
            "format": FUSION_FORMAT, "version": self.version, "verifiers": self.verifiers, "details": self.details,
            "features": self.feature_names, "method": self.method, "calibration": self.calibration,
            "alpha": self.alpha, "seed": self.seed, "target": self.target, "reject_target": self.reject_target,
            "thresholds": {"accept": self.accept, "reject": self.reject},
            "certificate": self.certificate.as_dict() if self.certificate else None,
            "reject_certificate": self.reject_certificate.as_dict() if self.reject_certificate else None,
            "metrics": self.metrics,
        }

    def _version(self) -> str:
        meta = {k: v for k, v in self.meta().items() if k != "version"}
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:10]
        return f"fusion-{self.method}-{digest}"

    def save(self, directory: Path) -> Path:
        """``fusion.json`` (readable metadata) and ``model.joblib`` (classifier + calibrator)."""
        if self.model is None:
            raise RuntimeError("LearnedFusion.save before fit")
        directory.mkdir(parents=True, exist_ok=True)
        joblib.dump({"model": self.model, "calibrator": self.calibrator}, directory / "model.joblib")
        (directory / "fusion.json").write_text(json.dumps(self.meta(), indent=2) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: Path) -> LearnedFusion:
        path = directory / "fusion.json"
        if not path.exists():
            raise FileNotFoundError(f"{directory} holds no fusion.json")
        meta = json.loads(path.read_text(encoding="utf-8"))
        if meta.get("format") != FUSION_FORMAT:
            raise ValueError(f"{path}: unknown format {meta.get('format')!r}, expected {FUSION_FORMAT}")
        fusion = cls(meta["verifiers"], details=meta["details"], method=meta["method"],
                     calibration=meta["calibration"], target=meta["target"], reject_target=meta["reject_target"],
                     alpha=meta["alpha"], seed=meta["seed"])
        state = joblib.load(directory / "model.joblib")
        fusion.model, fusion.calibrator = state["model"], state["calibrator"]
        fusion.accept, fusion.reject = meta["thresholds"]["accept"], meta["thresholds"]["reject"]
        fusion.certificate = Certificate(**meta["certificate"]) if meta["certificate"] else None
        fusion.reject_certificate = Certificate(**meta["reject_certificate"]) if meta["reject_certificate"] else None
        fusion.metrics, fusion.version = meta["metrics"], meta["version"]
        return fusion
