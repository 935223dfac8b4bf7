"""Learned, calibrated fusion of verifier outputs with certified three-way thresholds.

Each claim's verifier results become one feature row (:mod:`factloom.verify.fuse_features`): per
configured verifier the logit of its probability and an abstain indicator, plus chosen numeric
``details`` (for example the plausibility scorer's filtered ranks). A classifier (gradient boosting,
or logistic regression) is fitted on one part of the labelled validation facts; the other part —
never seen by the classifier — fits an isotonic (or Platt) calibration and then certifies the
thresholds with :mod:`factloom.verify.certify` (where the scan begins and how a certificate reads:
:mod:`factloom.verify.fuse_thresholds`):

* accept: the lowest threshold whose one-sided 95 % Clopper–Pearson bound on the error among
  auto-accepted facts is within ``target`` (default 0.0007); none when it cannot be certified;
* reject: the same test on the mirrored problem (true facts among auto-rejected ones within
  ``reject_target``, default ``target``).

Because calibration and certification use facts the classifier never saw, the bound is a finite-sample
guarantee for new facts from the same distribution.

With ``folds=K`` (cross-fitting) every labelled fact serves both purposes: the facts are cut into K
folds by a hash of their feature row, fold model k is fitted on the other folds, and each fact's
out-of-fold score calibrates and certifies. A new fact is scored by the fold model its own hash picks,
so it is scored exactly like the validation facts of that fold were, by a model that is independent of
them; pooled over folds the error count is a sum of independent binomials, which the Clopper–Pearson
bound at their mean rate covers. The classifier then learns from (K-1)/K of the facts instead of half.
Everything abstaining means review.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from factloom.model.calibrate import Calibrator, expected_calibration_error
from factloom.verify.base import Verdict, VerifierResult
from factloom.verify.certify import Certificate, certify_accept_threshold
from factloom.verify.fuse_features import Rows, feature_names, featurize
from factloom.verify.fuse_thresholds import shown_as_probability, start_block, why_uncertified
from factloom.verify.fusion import Fused

__all__ = ["LearnedFusion", "FUSION_FORMAT"]

FUSION_FORMAT = "factloom-fusion-1"


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
        folds: 0 for a held-out calibration part; ``K >= 2`` to cross-fit K fold models.
        start: the first threshold tested accepts ``start`` times the fewest facts that can certify.
        deploy: with cross-fitting, ``"fold"`` scores a new fact by the fold model its hash picks (the
            certificate is exact for it); ``"refit"`` by one model refitted on all labelled facts — more
            accurate, but the out-of-fold certificate then only approximates its error.
    """

    name = "fusion"

    def __init__(self, verifiers: Sequence[str], *, details: Mapping[str, Sequence[str]] | None = None,
                 method: str = "gbdt", calibration: str = "isotonic", target: float = 0.0007,
                 reject_target: float | None = None, alpha: float = 0.05, seed: int = 0, folds: int = 0,
                 start: float = 2.0, deploy: str = "fold") -> None:
        if method not in ("gbdt", "logistic"):
            raise ValueError(f"unknown fusion method {method!r}; use 'gbdt' or 'logistic'")
        if not verifiers:
            raise ValueError("a fusion needs at least one verifier")
        self.verifiers = list(verifiers)
        self.details = {k: list(v) for k, v in (details or {}).items()}
        if folds == 1 or folds < 0:
            raise ValueError(f"folds must be 0 (held-out calibration) or at least 2, got {folds}")
        self.method, self.calibration, self.alpha, self.seed, self.folds = method, calibration, alpha, seed, folds
        self.start = start
        if deploy not in ("fold", "refit"):
            raise ValueError(f"unknown deploy {deploy!r}; use 'fold' or 'refit'")
        self.deploy = deploy
        self.target = target
        self.reject_target = target if reject_target is None else reject_target
        self.model: Any = None
        self.refit: Any = None  # with deploy="refit": one model on all labelled facts scores new ones
        self.calibrator: Calibrator | None = None
        self.accept: float | None = None  # calibrated probability at the decision thresholds, for people
        self.reject: float | None = None
        self.accept_raw: float | None = None  # the decision thresholds, on the classifier's log-odds
        self.reject_raw: float | None = None
        self.held_out: tuple[np.ndarray, np.ndarray] | None = None  # scores and labels that certified (not saved)
        self.certificate: Certificate | None = None
        self.reject_certificate: Certificate | None = None
        self.metrics: dict[str, Any] = {}
        self.version = "untrained"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(verifiers={self.verifiers}, method={self.method!r}, "
                f"accept={self.accept}, reject={self.reject}, version={self.version!r})")

    @property
    def feature_names(self) -> list[str]:
        return feature_names(self.verifiers, self.details)

    def featurize(self, rows: Rows) -> np.ndarray:
        """(N, F) features (:mod:`factloom.verify.fuse_features`); missing values are NaN for gradient
        boosting, 0 for logistic regression."""
        out = featurize(rows, self.verifiers, self.details)
        return out if self.method == "gbdt" else np.nan_to_num(out, nan=0.0)

    def _new_model(self) -> Any:
        if self.method == "gbdt":
            # small trees and large leaves: with deeper trees entity statistics act as identifiers and the
            # model memorises entities of the labelled facts (CoDEx-S: -1 point when folds group by object)
            return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.04, max_leaf_nodes=7,
                                                  min_samples_leaf=50, l2_regularization=3.0, random_state=self.seed)
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))

    def _assign(self, x: np.ndarray) -> np.ndarray:
        """Each row's fold, from a hash of its features (so a fact always meets the same fold model)."""
        rows = np.ascontiguousarray(np.nan_to_num(x, nan=-7.77e7).round(9))
        return np.array([zlib.crc32(r.tobytes()) % self.folds for r in rows], dtype=np.int64)

    def _raw(self, x: np.ndarray, assign: np.ndarray | None = None) -> np.ndarray:
        """The classifier's log-odds: Platt scaling of a logit stays exact for a well-specified model."""
        if self.refit is not None and assign is None:
            p = np.asarray(self.refit.predict_proba(x)[:, 1], dtype=np.float64)
        elif isinstance(self.model, list):  # cross-fitted: each row scored by its own fold's model
            p = np.zeros(len(x))
            assign = self._assign(x) if assign is None else assign
            for k, model in enumerate(self.model):
                if (assign == k).any():
                    p[assign == k] = model.predict_proba(x[assign == k])[:, 1]
        else:
            p = np.asarray(self.model.predict_proba(x)[:, 1], dtype=np.float64)
        p = np.clip(p, 1e-9, 1 - 1e-9)
        return np.asarray(np.log(p / (1 - p)))

    def fit(self, rows: Rows, labels: Sequence[int], *, calib_rows: Rows | None = None,
            calib_labels: Sequence[int] | None = None, holdout: float = 0.5,
            groups: Sequence[str] | None = None) -> LearnedFusion:
        """Fit the classifier, then calibrate and certify on data it did not see.

        Without ``calib_rows`` a stratified ``holdout`` share of ``rows`` is set aside for calibration
        and certification. ``groups`` (cross-fitting only), e.g. each fact's object entity, keeps a
        group's facts in one fold, so out-of-fold scores never profit from the model having learned
        the same entity: a more pessimistic, safer basis for the certificate.
        """
        y = np.asarray(labels, dtype=np.int64)
        if len(y) != len(rows):
            raise ValueError(f"{len(rows)} rows but {len(y)} labels")
        if self.folds and calib_rows is None:
            return self._fit_crossfit(rows, y, groups)
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
        self._calibrate_and_certify(self._raw(self.featurize(calib_rows)), yc, fit_facts=int(len(y)))
        return self

    def _fit_crossfit(self, rows: Rows, y: np.ndarray, groups: Sequence[str] | None) -> LearnedFusion:
        if len(np.unique(y)) < 2:
            raise ValueError("the fit facts need both true and false ones")
        if groups is not None and len(groups) != len(y):
            raise ValueError(f"{len(y)} rows but {len(groups)} groups")
        x = self.featurize(rows)
        salt = f"fusion-{self.seed}:"  # independent of any grouping the caller used around this fit
        assign = (self._assign(x) if groups is None else
                  np.array([zlib.crc32(f"{salt}{g}".encode()) % self.folds for g in groups], dtype=np.int64))
        models = []
        for k in range(self.folds):
            out = assign == k
            if len(np.unique(y[~out])) < 2 or not out.any():
                raise ValueError(f"fold {k} of {self.folds} is empty or one-sided: too few labelled facts")
            models.append(self._new_model().fit(x[~out], y[~out]))
        self.model = models
        self.refit = self._new_model().fit(x, y) if self.deploy == "refit" else None
        raw = self._raw(x, assign)  # out-of-fold by construction
        self._calibrate_and_certify(raw, y, fit_facts=int(len(y) * (self.folds - 1) / self.folds))
        if groups is not None:
            self.metrics["certificate_basis"] += ", folds grouped"
        if self.refit is not None:
            self.metrics["certificate_basis"] += "; deployed model refitted on all facts (approximate)"
        self.version = self._version()
        return self

    def _calibrate_and_certify(self, raw: np.ndarray, yc: np.ndarray, *, fit_facts: int) -> None:
        self.calibrator = Calibrator(self.calibration).fit(raw.tolist(), yc.tolist())
        p = self.calibrator.predict(raw.tolist())
        self.held_out = (raw, yc)
        self.choose_thresholds(raw.tolist(), yc.tolist())
        acc = raw >= self.accept_raw if self.accept_raw is not None else np.zeros(len(raw), dtype=bool)
        rej = (raw <= self.reject_raw) & ~acc if self.reject_raw is not None else np.zeros(len(raw), dtype=bool)
        point = {"automation": float((acc | rej).mean()), "accepted": int(acc.sum()), "rejected": int(rej.sum()),
                 "error": float((yc[acc] == 0).mean()) if acc.any() else 0.0,
                 "reject_error": float((yc[rej] == 1).mean()) if rej.any() else 0.0}
        self.metrics = {
            "fit_facts": fit_facts, "calibration_facts": int(len(yc)),
            "certificate_basis": f"{self.folds}-fold cross-fitted" if self.folds else "held-out part",
            "calibration_accuracy": float(((p >= 0.5) == yc).mean()),
            "calibration_ece": expected_calibration_error(p.tolist(), yc.tolist()),
            **{f"calibration_{k}": v for k, v in point.items()},
        }
        self.version = self._version()

    def choose_thresholds(self, scores: Sequence[float], labels: Sequence[int], *,
                          target: float | None = None, reject_target: float | None = None) -> None:
        """Certify accept / reject thresholds on held-out classifier log-odds (sets them on self).

        The scan runs over the raw scores, which have no ties, so every fact is its own candidate
        threshold; ``accept`` / ``reject`` report the calibrated probability at the chosen raw thresholds
        (``accept_raw`` / ``reject_raw``), which are what :meth:`fuse_many` compares against.
        ``fusion.choose_thresholds(*fusion.held_out, target=0.01)`` re-targets a fitted fusion.
        """
        if target is not None:
            self.target = target
            self.reject_target = target if reject_target is None else reject_target
        elif reject_target is not None:
            self.reject_target = reject_target
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        scan = {"alpha": self.alpha, "start": self.start}  # where the scan begins; why it found nothing
        acc = certify_accept_threshold(start_block(s, self.target, **scan).tolist(), y.tolist(), target=self.target,
                                       alpha=self.alpha)
        rej = certify_accept_threshold(start_block(-s, self.reject_target, **scan).tolist(), (1 - y).tolist(),
                                       target=self.reject_target, alpha=self.alpha)
        self.accept_raw = acc.threshold
        self.reject_raw = None if rej.threshold is None else -rej.threshold
        if self.accept_raw is not None and self.reject_raw is not None and self.reject_raw >= self.accept_raw:
            self.reject_raw = None  # cannot happen with small targets; never let the two overlap
        self.accept, self.reject = self._prob(self.accept_raw), self._prob(self.reject_raw)
        self.certificate = shown_as_probability(acc, self.accept, "p >=", why_uncertified(s, y, self.target, **scan))
        self.reject_certificate = shown_as_probability(rej, self.reject, "p <=",
                                                       why_uncertified(-s, 1 - y, self.reject_target, **scan))
        self.version = self._version()

    def _prob(self, raw: float | None) -> float | None:
        if raw is None or self.calibrator is None:
            return None
        return float(self.calibrator.predict([raw])[0])

    def predict_proba(self, rows: Rows) -> np.ndarray:
        """Calibrated probability of truth per row (NaN where every verifier abstained)."""
        return self.scores(rows)[1]

    def scores(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """Classifier log-odds and calibrated probability per row (NaN where every verifier abstained)."""
        if self.model is None or self.calibrator is None:
            raise RuntimeError("LearnedFusion.predict_proba before fit or load")
        if not rows:
            return np.zeros(0), np.zeros(0)
        raw = self._raw(self.featurize(rows))
        p = self.calibrator.predict(raw.tolist())
        silent = np.array([all(r.probability is None for r in rs) for rs in rows])
        raw[silent], p[silent] = np.nan, np.nan
        return raw, p

    def fuse(self, results: Sequence[VerifierResult]) -> Fused:
        return self.fuse_many([results])[0]

    def fuse_many(self, rows: Rows) -> list[Fused]:
        """One :class:`Fused` per claim; one batched model call."""
        raws, probs = self.scores(rows)
        out = []
        for results, raw, p in zip(rows, raws, probs, strict=True):
            voting = [r for r in results if r.probability is not None]
            if not voting:
                out.append(Fused(None, Verdict.review, "every verifier abstained"))
                continue
            worst = min(voting, key=lambda r: r.probability or 0.0)
            doubt = f"weakest {worst.verifier}: {worst.explanation}"
            if self.accept_raw is not None and raw >= self.accept_raw:
                out.append(Fused(float(p), Verdict.accept,
                                 f"fused p {p:.4f} >= accept {self.accept:.4f} (certified {self.target:g})"))
            elif self.reject_raw is not None and raw <= self.reject_raw:
                out.append(Fused(float(p), Verdict.reject, f"fused p {p:.4f} <= reject {self.reject:.4f}; {doubt}"))
            else:
                out.append(Fused(float(p), Verdict.review, f"fused p {p:.4f} needs review; {doubt}"))
        return out

    def meta(self) -> dict[str, Any]:
        return {
            "format": FUSION_FORMAT, "version": self.version, "verifiers": self.verifiers, "details": self.details,
            "features": self.feature_names, "method": self.method, "calibration": self.calibration,
            "alpha": self.alpha, "seed": self.seed, "folds": self.folds, "deploy": self.deploy,
            "start": self.start, "target": self.target,
            "reject_target": self.reject_target,
            "thresholds": {"accept": self.accept, "reject": self.reject, "accept_log_odds": self.accept_raw,
                           "reject_log_odds": self.reject_raw},
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
        joblib.dump({"model": self.model, "refit": self.refit, "calibrator": self.calibrator},
                    directory / "model.joblib")
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
                     alpha=meta["alpha"], seed=meta["seed"], folds=meta.get("folds", 0),
                     start=meta.get("start", 2.0), deploy=meta.get("deploy", "fold"))
        state = joblib.load(directory / "model.joblib")
        fusion.model, fusion.calibrator, fusion.refit = state["model"], state["calibrator"], state.get("refit")
        th = meta["thresholds"]
        fusion.accept, fusion.reject = th["accept"], th["reject"]
        fusion.accept_raw, fusion.reject_raw = th.get("accept_log_odds"), th.get("reject_log_odds")
        fusion.certificate = Certificate(**meta["certificate"]) if meta["certificate"] else None
        fusion.reject_certificate = Certificate(**meta["reject_certificate"]) if meta["reject_certificate"] else None
        fusion.metrics, fusion.version = meta["metrics"], meta["version"]
        return fusion
