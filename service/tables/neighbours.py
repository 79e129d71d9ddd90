"""The fourth fallback policy: every variant's regret interpolated from the neighbouring shapes.

Why: on the H200 sweep of the current tb-decode space the winners flip between neighbouring shapes
(split-K vs the persistent cp.async ring at M 3-4, quarter-warp rows at short K), and a tree or
segments fitted on winners, or a model of times, copies the wrong neighbour's winner 5-60% off. What
does carry from a shape to its neighbours is the whole regret vector: a variant within 1% of the best
at every neighbour is a safe answer even where the neighbours' winners disagree.

Model (per codebook and M key; nothing pooled across them, regret is relative to each point's own
best): at a query (n, k) every variant's predicted regret is the Gaussian-weighted mean of its
measured regret at the training shapes, in (log2 n, log2 k) with bandwidths ``(hn, hk)`` octaves; a
variant measured at under MIN_COVER of the weight, or not valid at the query (the package's own
restrictions, ``Validity``), is not a candidate. The answer is the argmin. Two estimators of a
variant's regret at the query: "constant" (the weighted mean above) and "linear" (a weighted
least-squares plane in (log2 n, log2 k) centred on the query, its slopes shrunk by SLOPE_RIDGE, the
intercept answering): the training shapes sit 1.2-1.3 octaves apart and a regret that rises
towards one side of the query is read at the query, not averaged over both sides (on the H200
recording of the current space, Q4_0, nested choice: 2.63% -> 2.16% mean held-out regret). The
estimator and the bandwidths are chosen per codebook from METHODS x BANDWIDTHS by
leave-one-shape-out over the training shapes (vectorised: one weight matrix with a zero diagonal
per candidate), so nothing is tuned on a shape held out further out (bench/table_regret.py).

Table: the model's predicted regrets label a grid of (M, N, K) (GRID_STEP octaves over the training
range and ``GRID_BEYOND`` beyond it); a regret tree (service.tables.tree.fit_tree_matrix, grown
through zero-gain cuts and pruned where a subtree gains under MIN_GAIN) compresses it into integer
comparisons on M, N, K that every dialect renders. Pure numpy over plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.tables.model import MeasuredPoint
from service.tables.surrogate import grid_values
from service.tables.tree import MISSING_COST, FallbackTree, fit_tree_matrix
from service.tables.validity import Validity, always_valid, domain_ks, grid_validity

BANDWIDTHS: tuple[float, ...] = (0.5, 0.75, 1.0)  # octaves of N and of K, each chosen by inner LOSO
DEFAULT_BANDWIDTH = (0.75, 0.75)  # fewer than 3 shapes: nothing to choose on
MIN_COVER = 0.5  # share of a query's kernel weight a variant must be measured under
METHODS: tuple[str, ...] = ("constant", "linear")  # estimator of a variant's regret, chosen by inner LOSO
SLOPE_RIDGE = 0.3  # ridge on the linear estimator's slopes (regret per octave), nearest weight 1; 1e-3: 2.3%
UNMEASURED_PENALTY = 1.0  # held-out regret of an answer not measured (or failing parity) there
GRID_STEP = 0.125  # 0.25 lost 0.4% mean held-out regret to the argmin on the H200 sweep
GRID_BEYOND = 1.0  # octaves of N and K labelled beyond the training range
TREE_DEPTH = 14
MIN_GAIN = 0.0  # the tree reproduces the labels; 0.001 and 0.0002 lost 0.3-0.6%


@dataclass
class RegretKernel:
    """One codebook and M key: the training shapes' regret vectors over ``variants``."""

    codebook: int
    m: int
    variants: tuple[str, ...]
    log_n: np.ndarray  # shapes
    log_k: np.ndarray
    regret: np.ndarray  # shapes x variants measured regret, 0 where not measured
    measured: np.ndarray  # shapes x variants bool
    valid_at: np.ndarray  # shapes x variants bool: valid at each training shape (for inner LOSO)

    @staticmethod
    def of(points: Sequence[MeasuredPoint], variants: Sequence[str], valid: Validity) -> RegretKernel:
        cb, m = points[0].codebook, points[0].m
        names = tuple(variants)
        regret = np.zeros((len(points), len(names)))
        measured = np.zeros((len(points), len(names)), dtype=bool)
        col = {v: j for j, v in enumerate(names)}
        for i, p in enumerate(points):
            times = p.times_us or {}
            best = min(times.values())
            for v, t in times.items():
                regret[i, col[v]] = t / best - 1.0
                measured[i, col[v]] = True
        valid_at = np.array([[valid(v, cb, p.m, p.n, p.k) for v in names] for p in points], dtype=bool)
        return RegretKernel(
            cb, m, names, np.log2([p.n for p in points]), np.log2([p.k for p in points]),
            regret, measured, valid_at,
        )  # fmt: skip

    def _scores(
        self, weight: np.ndarray, dn: np.ndarray | None = None, dk: np.ndarray | None = None
    ) -> np.ndarray:
        """queries x variants predicted regret (inf below MIN_COVER) from queries x shapes weights; with
        ``dn``, ``dk`` (queries x shapes: each training shape's log2 offset from the query) the linear
        estimator's intercept, else the weighted mean."""
        den = weight @ self.measured
        cover = den / np.maximum(weight.sum(axis=1, keepdims=True), 1e-300)
        if dn is None or dk is None:
            score = (weight @ self.regret) / np.maximum(den, 1e-300)
        else:
            # the normal equations of each (query, variant) from matrix products: sums over the
            # measured training shapes of w, w dn, w dk, w dn^2, w dn dk, w dk^2 (and regret-weighted)
            m, r = self.measured.astype(float), self.regret
            s_n, s_k = (weight * dn) @ m, (weight * dk) @ m
            gram = np.stack(
                [
                    np.stack([den, s_n, s_k], -1),
                    np.stack([s_n, (weight * dn * dn) @ m + SLOPE_RIDGE, (weight * dn * dk) @ m], -1),
                    np.stack([s_k, (weight * dn * dk) @ m, (weight * dk * dk) @ m + SLOPE_RIDGE], -1),
                ],
                -2,
            )
            rhs = np.stack([weight @ r, (weight * dn) @ r, (weight * dk) @ r], -1)
            gram[..., 0, 0] += 1e-12
            score = np.linalg.solve(gram, rhs[..., None])[..., 0, 0]
        return np.where(cover >= MIN_COVER, score, np.inf)

    def _weights(self, qn: np.ndarray, qk: np.ndarray, hn: float, hk: float) -> np.ndarray:
        d2 = ((qn[:, None] - self.log_n[None, :]) / hn) ** 2 + ((qk[:, None] - self.log_k[None, :]) / hk) ** 2
        return np.exp(-(d2 - d2.min(axis=1, keepdims=True)) / 2)  # nearest shape 1: never all zero

    def predict(
        self,
        ns: Sequence[int],
        ks: Sequence[int],
        bandwidth: tuple[float, float],
        valid: np.ndarray,
        method: str = "constant",
    ) -> np.ndarray:
        """queries x variants predicted regret at (ns[i], ks[i]); inf where not a candidate."""
        qn, qk = np.log2(np.asarray(ns, float)), np.log2(np.asarray(ks, float))
        weight = self._weights(qn, qk, *bandwidth)
        if method == "linear":
            score = self._scores(weight, self.log_n[None, :] - qn[:, None], self.log_k[None, :] - qk[:, None])
        else:
            score = self._scores(weight)
        return np.where(valid, score, np.inf)

    def held_out(self, bandwidth: tuple[float, float], method: str = "constant") -> np.ndarray:
        """Per training shape, the regret of the argmin answered from the other shapes alone."""
        hn, hk = bandwidth
        d2 = ((self.log_n[:, None] - self.log_n[None, :]) / hn) ** 2
        d2 = d2 + ((self.log_k[:, None] - self.log_k[None, :]) / hk) ** 2
        np.fill_diagonal(d2, np.inf)
        low = d2.min(axis=1, keepdims=True)
        weight = np.exp(-(d2 - np.where(np.isfinite(low), low, 0.0)) / 2)
        if method == "linear":
            offsets = (self.log_n[None, :] - self.log_n[:, None], self.log_k[None, :] - self.log_k[:, None])
            score = np.where(self.valid_at, self._scores(weight, *offsets), np.inf)
        else:
            score = np.where(self.valid_at, self._scores(weight), np.inf)
        out = np.full(len(score), UNMEASURED_PENALTY)
        for i, row in enumerate(score):
            if np.isfinite(row).any():
                j = int(np.argmin(row))
                if self.measured[i, j]:
                    out[i] = self.regret[i, j]
        return out


@dataclass
class NeighbourModel:
    """One codebook's kernels (per M key) and the estimator and bandwidth its inner LOSO chose."""

    codebook: int
    kernels: Mapping[int, RegretKernel]
    bandwidth: tuple[float, float]
    valid: Validity
    inner_regret: float | None = None  # mean inner held-out regret at the chosen bandwidth
    method: str = "constant"  # one of METHODS

    def answer(self, m: int, n: int, k: int) -> str | None:
        kernel = self.kernels.get(m)
        if kernel is None or n <= 0 or k <= 0:
            return None
        ok = np.array([self.valid(v, self.codebook, m, n, k) for v in kernel.variants], dtype=bool)
        row = kernel.predict([n], [k], self.bandwidth, ok[None, :], self.method)[0]
        return kernel.variants[int(np.argmin(row))] if np.isfinite(row).any() else None


def fit_neighbours(
    points: Sequence[MeasuredPoint],
    valid: Validity = always_valid,
    bandwidths: Sequence[float] = BANDWIDTHS,
    methods: Sequence[str] = METHODS,
) -> dict[int, NeighbourModel]:
    """Per codebook, the regret kernels of its timed points and the estimator and bandwidth (hn, hk)
    with the least mean leave-one-shape-out regret over them (ties: the constant estimator, then the
    wider, smoother bandwidth)."""
    out: dict[int, NeighbourModel] = {}
    for cb in sorted({p.codebook for p in points}):
        group = [p for p in points if p.codebook == cb and p.times_us]
        if not group:
            continue
        variants = tuple(sorted({v for p in group for v in p.times_us or {}}))
        kernels = {
            m: RegretKernel.of(
                sorted((p for p in group if p.m == m), key=lambda p: (p.n, p.k)), variants, valid
            )
            for m in sorted({p.m for p in group})
        }
        shapes = len({(p.n, p.k) for p in group})
        choice, inner, method = DEFAULT_BANDWIDTH, None, "constant"
        if shapes >= 3:
            scored = []
            for rank, how in enumerate(methods):
                for hn in bandwidths:
                    for hk in bandwidths:
                        held = np.concatenate([kern.held_out((hn, hk), how) for kern in kernels.values()])
                        scored.append((round(float(held.mean()), 12), rank, -hn - hk, -hn, (hn, hk), how))
            best = min(scored)
            choice, inner, method = best[4], best[0], best[5]
        out[cb] = NeighbourModel(cb, kernels, choice, valid, inner, method)
    return out


def neighbours_answer(models: Mapping[int, NeighbourModel]) -> Callable[[MeasuredPoint], str | None]:
    """The model's own argmin (no grid, no tree)."""

    def answer(p: MeasuredPoint) -> str | None:
        model = models.get(p.codebook)
        return None if model is None else model.answer(p.m, p.n, p.k)

    return answer


def neighbours_tree(model: NeighbourModel) -> FallbackTree:
    """The regret tree of the model's labels on a (M, N, K) grid: what a table emits."""
    ns_all = [round(2**x) for kern in model.kernels.values() for x in kern.log_n]
    ks_all = [round(2**x) for kern in model.kernels.values() for x in kern.log_k]
    ns = grid_values(ns_all, GRID_BEYOND, GRID_BEYOND, GRID_STEP)
    ks = domain_ks(grid_values(ks_all, GRID_BEYOND, GRID_BEYOND, GRID_STEP))
    names = sorted({v for kern in model.kernels.values() for v in kern.variants})
    col = {v: j for j, v in enumerate(names)}
    parts, bases = [], []
    for m, kern in model.kernels.items():
        qn = np.repeat(ns, len(ks))
        qk = np.tile(ks, len(ns))
        ok = grid_validity(model.valid, model.codebook, m, kern.variants, ns, ks).reshape(
            len(ns) * len(ks), -1
        )
        score = kern.predict(qn.tolist(), qk.tolist(), model.bandwidth, ok, model.method)
        keep = np.isfinite(score).any(axis=1)
        matrix = np.full((int(keep.sum()), len(names)), MISSING_COST)
        cols = [col[v] for v in kern.variants]
        matrix[:, cols] = np.where(np.isfinite(score[keep]), score[keep], MISSING_COST)
        parts.append(matrix)
        bases.append(np.column_stack([np.full(int(keep.sum()), m), qn[keep], qk[keep]]).astype(np.int64))
    matrix = np.concatenate(parts)
    winners = np.argmin(matrix, axis=1)
    wins = {names[j]: int(c) for j, c in zip(*np.unique(winners, return_counts=True), strict=True)}
    root = fit_tree_matrix(
        matrix, names, np.concatenate(bases), wins, TREE_DEPTH, 1, min_gain=MIN_GAIN, grow_through=True,
        validity=model.valid, codebook=model.codebook,
    )  # fmt: skip
    return FallbackTree(model.codebook, tuple(sorted(model.kernels)), root, TREE_DEPTH, 1)
