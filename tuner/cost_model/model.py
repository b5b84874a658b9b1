"""The cost model: XGBoost on program features, predicting normalised throughput.

Targets are per workload: a candidate's score is the best latency measured
for its workload divided by its own latency (1.0 for the best, toward 0 for
slow ones, 0 for failures), so workloads of very different sizes train one
model. Two objectives are offered — squared-error regression on that score,
and pairwise ranking within each workload (`rank:pairwise`, groups by
workload) — because the search only needs the order; `benchmarks/cost_model.py`
measures which ranks held-out workloads better (NDCG) and `DEFAULT_OBJECTIVE`
is the winner. Until `min_samples` results are in, predictions are random
(seeded), so the search is replay-like rather than guided by noise.

Regression stays the default: the two objectives tie within the noise between
measurement collections, and rank must win by 0.02 and lose in neither setting.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ir.errors import LoomtuneError

OBJECTIVES = ("regression", "rank")
DEFAULT_OBJECTIVE = "regression"
MODEL_FORMAT = "loomtune.cost_model/1"


class CostModelError(LoomtuneError):
    """Model bytes that cannot be read back."""


def normalised_throughput(latencies: Sequence[float | None], groups: Sequence[str]) -> np.ndarray:
    """best latency of the group / latency; 0 for failures (None)."""
    best: dict[str, float] = {}
    for lat, g in zip(latencies, groups):
        if lat is not None and lat > 0 and (g not in best or lat < best[g]):
            best[g] = lat
    return np.asarray(
        [
            best[g] / lat if lat is not None and lat > 0 else 0.0
            for lat, g in zip(latencies, groups)
        ],
        dtype=np.float32,
    )


@dataclass
class XGBCostModel:
    """An XGBoost model that retrains on all samples it has seen, on each update."""

    objective: str = DEFAULT_OBJECTIVE
    seed: int = 0
    min_samples: int = 16
    rounds: int = 60
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float | None] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    _booster: object | None = None
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise CostModelError(
                f"unknown cost model objective {self.objective!r}; expected one of {OBJECTIVES}"
            )
        self._rng = random.Random(self.seed)

    @property
    def samples(self) -> int:
        return len(self.latencies)

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def add(
        self,
        features: Sequence[np.ndarray],
        latencies: Sequence[float | None],
        groups: Sequence[str],
    ) -> None:
        self.features.extend(np.asarray(f, dtype=np.float32) for f in features)
        self.latencies.extend(latencies)
        self.groups.extend(groups)

    def update(
        self,
        features: Sequence[np.ndarray],
        latencies: Sequence[float | None],
        groups: Sequence[str],
    ) -> None:
        """Add samples and retrain (once there are enough, with at least one success)."""
        self.add(features, latencies, groups)
        self.fit()

    def fit(self) -> None:
        if self.samples < self.min_samples or not any(lat is not None for lat in self.latencies):
            return
        import xgboost as xgb

        x = np.stack(self.features)
        y = normalised_throughput(self.latencies, self.groups)
        params: dict[str, object] = {
            "max_depth": 6,
            "eta": 0.2,
            "min_child_weight": 1,
            "subsample": 1.0,
            "seed": self.seed,
            "nthread": 1,
            "verbosity": 0,
            "tree_method": "hist",
        }
        if self.objective == "rank":
            order = sorted(range(len(self.groups)), key=lambda i: self.groups[i])
            qid_of = {g: i for i, g in enumerate(sorted(set(self.groups)))}
            dtrain = xgb.DMatrix(
                x[order], label=y[order], qid=[qid_of[self.groups[i]] for i in order]
            )
            params["objective"] = "rank:pairwise"
        else:
            dtrain = xgb.DMatrix(x, label=y)
            params["objective"] = "reg:squarederror"
        self._booster = xgb.train(params, dtrain, num_boost_round=self.rounds)

    def predict(self, features: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """Higher is better; random (seeded) until the model is trained."""
        n = len(features)
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        if self._booster is None:
            return np.asarray([self._rng.random() for _ in range(n)], dtype=np.float32)
        import xgboost as xgb

        return self._booster.predict(
            xgb.DMatrix(np.stack([np.asarray(f, dtype=np.float32) for f in features]))
        )  # type: ignore[attr-defined]

    # -- persistence -----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The trained booster with a small header; the samples themselves stay in the database."""
        raw = bytes(self._booster.save_raw("ubj")) if self._booster is not None else b""  # type: ignore[attr-defined]
        header = {
            "format": MODEL_FORMAT,
            "objective": self.objective,
            "samples": self.samples,
            "seed": self.seed,
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        head = json.dumps(header).encode()
        return len(head).to_bytes(4, "big") + head + raw

    @staticmethod
    def from_bytes(data: bytes) -> XGBCostModel:
        try:
            n = int.from_bytes(data[:4], "big")
            header = json.loads(data[4 : 4 + n])
            raw = data[4 + n :]
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise CostModelError(f"cost model bytes are corrupt: {e}") from None
        if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
            raise CostModelError(f"not a loomtune cost model (expected {MODEL_FORMAT})")
        # XGBoost may crash the process on a damaged booster, so damage is caught here.
        if header.get("sha256") != hashlib.sha256(raw).hexdigest():
            raise CostModelError("cost model bytes are corrupt (checksum mismatch)")
        model = XGBCostModel(
            objective=header.get("objective", DEFAULT_OBJECTIVE), seed=int(header.get("seed", 0))
        )
        if raw:
            import xgboost as xgb

            booster = xgb.Booster()
            try:
                booster.load_model(bytearray(raw))
            except xgb.core.XGBoostError as e:
                raise CostModelError(
                    f"cost model booster is corrupt: {str(e).splitlines()[0]}"
                ) from None
            model._booster = booster
        return model
