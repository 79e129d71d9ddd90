"""The fourth fallback policy: every variant's regret interpolated from the neighbouring shapes.

Why: on the H200 sweep of the current tb-decode space the winners flip between neighbouring shapes
(split-K vs the persistent cp.async ring at M 3-4, quarter-warp rows at short K), and a tree or
segments fitted on winners, or a model of times, copies the wrong neighbour's winner 5-60% off. What
does carry from a shape to its neighbours is the whole regret vector: a variant within 1% of the best
at every neighbour is a safe answer even where the neighbours' winners disagree.

Model (per codebook and M key; nothing pooled across them, regret is relative to each point's own
best): at a query (n, k) every variant's predicted regret is the Gaussian-weighted mean of its
measured regret at the training shapes, in (log2 n, log2 k) with bandwidths ``(hn, hk)`` octaves; a
variant measured at under MIN_COVER of the weight of the shapes where it can run, or not valid at
the query (the package's own restrictions, ``Validity``), is not a candidate. The answer is the
argmin. Two estimators of a variant's regret at the query: "constant" (the weighted mean above) and
"linear" (a weighted least-squares plane in (log2 n, log2 k) centred on the query, its slopes shrunk
by SLOPE_RIDGE, the intercept answering): the training shapes sit 1.2-1.3 octaves apart and a regret
that rises towards one side of the query is read at the query, not averaged over both sides (on the
H200 recording of the current space, Q4_0, nested choice: 2.63% -> 2.16% mean held-out regret). The
estimator and the bandwidths are chosen per codebook from METHODS x BANDWIDTHS by leave-one-shape-
out over the training shapes (vectorised: one weight matrix with a zero diagonal per candidate), so
nothing is tuned on a shape held out further out (bench/table_regret.py).

The third estimator, "additive", reads what the other two smooth away: a variant's quirks that
belong to one N or one K (wave quantisation of its tiles at that N, its K slice's shared memory at
that K) repeat along the measured grid's row and column through the query. Per query and variant,
a weighted ridge fit of the log time on the local plane plus one effect per measured N value and
one per measured K value (ridge LEVEL_RIDGE); the intercept plus the effects of the query's own N
and K (the measured values within LEVEL_TOL octaves; none if there is none) answers, and a variant's
regret at the query is its predicted time over the least predicted among the candidates. On the
dense H200 recording (Q4_0, 426 points on 107 shapes, nested choice) its argmin's leave-one-shape-
out regret is 0.89% mean / 4.5% p95 where the linear estimator's was 1.82% / 7.99% (the best of the
8 nearest shapes' winners, picked with hindsight: 0.42% / 2.5%). Tried there and not kept (each
worse or no better): candidates cut to the winners (or near-winners) of the 4-16 nearest shapes,
weighted quantiles, an uncertainty penalty, regret capped before fitting, pooling the other M's
observations, effects per work-size (N x K) band, a launch-rounds covariate (only one point moved),
hedging toward a smoother fit. Nor, on the same data (argmin, mean / p95 against 0.86% / 4.46%):
the estimator and bandwidths chosen per M key (0.87% / 4.51%), bandwidths of 0.375 or 1.5 octaves
beside these (0.86% / 4.46%, 0.84% / 4.62%), a K slope per measured N (0.93-0.94% / 4.8-5.1%),
choosing by the root mean square or mean + p95 / 4 of the inner held-out regret (0.81% / 4.32%,
0.84% / 4.46%: within what one shape more or less moves). Of the 38 points over 3%, the measured best
is the model's second or third choice at 26 (at 22 of them predicted under 4% behind): near-tied
variants whose order flips between neighbouring shapes (PG0 / PG3, RW1 / RW2, PP2 / PP3 of one ring).
Choosing other than by the argmin does not get the p95 down either (bench/loso_choice_rules.py --data
bench/results/loso-dense-recording-h200-2026-12-01-dense-b.json.gz, model only, mean / p95 / points
over 3% against 0.86% / 4.46% / 38): the mean (max) of the predicted regrets of the 3 (4) best
estimator x bandwidth candidates of the inner LOSO 0.85% / 4.41% / 37 (0.87% / 4.46% / 39), of all
27 1.67% / 7.42%; among the argmin's top 2 within 1% (2%) of it, the one of least measured regret at
the 3 (2) nearest training shapes 0.83% / 4.46% / 40 (0.86% / 4.64% / 41), or the top 5 scored by
prediction + 0.1 x the mean measured regret at the 4 nearest 0.89% / 4.86%; prediction + 0.5 x the
kernel-weighted positive inner-LOSO error of the variant (0.25 x absolute) 0.85% / 4.46% / 38 (0.87%
/ 4.46% / 40); averaged with 0.1 x (capped at 10%) or 0.25 x the neighbouring M keys' prediction
0.86% / 4.46% (1.00% / 5.06%); near-ties (within 0.5%) broken by the constant estimator 0.91% /
4.80%; the median (q75) of 24 Poisson-reweighted refits 0.89% / 5.06% (0.97% / 5.29%); fitting the
additive estimator on log(1 + regret) instead of log time (--target regret) 0.96% / 4.90%. With
hindsight the measured best of the argmin's top 2 (3) would give 0.38% / 2.22% (0.15% / 0.49%): the
information is in the top candidates, but nothing seen at the neighbours says which of them. Of the
additive estimator's own constants (--argmin-only): ADDITIVE_SLOPE_RIDGE 0.03 0.77% / 4.32% / 33,
0.01 0.82% / 4.41% / 33, 0.05 0.87% / 4.78% / 39 (not monotone: not kept; the in-sample tree and the
generator's LOSO were not rerun with it), LEVEL_RIDGE 0.03 (0.3) 0.93% / 4.94% (0.92% / 5.06%). Nor the
candidates cut to a greedy set cover of the training points (each fold's own; --cover, 2026-12-02) within
1% / 2% / 3% / 5% of each point's best (55 / 46 / 42 / 29 of 94 variants): 0.85% / 4.46%, 0.87% / 4.42%,
1.15% / 5.33%, 1.26% / 5.78%.

Table: the model's predicted regrets label a grid of (M, N, K) (GRID_STEP octaves over the training
range and ``GRID_BEYOND`` beyond it, plus the measured N and every multiple of 256 in K up to
QUANTUM_BEYOND octaves above the measured range); a regret tree (service.tables.tree.fit_tree_matrix,
grown through zero-gain cuts and pruned where a subtree gains under MIN_GAIN) compresses it into
integer comparisons on M, N, K, and on K % q where a variant runs only at multiples of q
(KModFeature), that every dialect renders. A variant is a label only where it is valid at every K
its leaf may answer (validity.grid_validity), and at the crossings of a measured N and a measured K
that no point measured, the model's own argmin is grafted onto the tree (graft_crossings). Before
these (a grid of 1/8 octave, a variant valid at a point's 8 grid neighbours), the tree never
answered RG16 KB4 (valid at K % 1024 == 0 only) and lost 9.46% mean held-out regret on the dense H200
recording where its model's argmin lost 1.82%. Pure numpy over plain data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from service.tables.model import MeasuredPoint
from service.tables.surrogate import grid_values
from service.tables.tree import (
    MISSING_COST,
    FallbackTree,
    KModFeature,
    TreeNode,
    feature_value,
    fit_tree_matrix,
)
from service.tables.validity import (
    K_QUANTUM,
    Validity,
    always_valid,
    domain_ks,
    grid_validity,
    k_moduli,
    quantum_ks,
)

BANDWIDTHS: tuple[float, ...] = (0.5, 0.75, 1.0)  # octaves of N and of K, each chosen by inner LOSO
DEFAULT_BANDWIDTH = (0.75, 0.75)  # fewer than 3 shapes: nothing to choose on
MIN_COVER = 0.5  # share of a query's kernel weight a variant must be measured under
METHODS: tuple[str, ...] = ("constant", "linear", "additive")  # estimator, chosen by inner LOSO
SLOPE_RIDGE = 0.3  # ridge on the linear estimator's slopes (regret per octave), nearest weight 1; 1e-3: 2.3%
ADDITIVE_SLOPE_RIDGE = 0.1  # the additive fit's plane slopes (log time per octave); 0.3: 0.06% worse
LEVEL_RIDGE = 0.1  # the additive fit's per-N and per-K effects (log time); 0.03 and 0.3 no better
LEVEL_TOL = 1 / 16  # octaves: a query takes the effect of a measured N (K) this near; half GRID_STEP
ADDITIVE_CHUNK = (
    64  # queries per batch of the additive fit's normal equations (memory ~ chunk x variants x P^2)
)
LEVEL_MIN_WEIGHT = 1e-4  # a batch's fit leaves out shapes (and levels) weighing less at all its queries
UNMEASURED_PENALTY = 1.0  # held-out regret of an answer not measured (or failing parity) there
GRID_STEP = 0.125  # 0.25 lost 0.4% mean held-out regret to the argmin on the H200 sweep
GRID_BEYOND = 1.0  # octaves of N and K labelled beyond the training range
TREE_DEPTH = 14
QUANTUM_BEYOND = 0.5  # octaves above the largest training K that the grid holds every multiple of 256 of
GRAFT_MIN = 0.0  # predicted regret of the tree's answer at a crossing above which the crossing is grafted
MIN_GAIN = 0.0  # the tree reproduces the labels; 0.001 and 0.0002 lost 0.3-0.6%


def _level(values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Per query the index of the nearest of the sorted ``values`` within LEVEL_TOL, else -1."""
    j = np.clip(np.searchsorted(values, query), 1, max(1, len(values) - 1))
    if len(values) > 1:
        j = np.where(np.abs(values[j - 1] - query) <= np.abs(values[j] - query), j - 1, j)
    else:
        j = np.zeros(len(query), dtype=int)
    return np.where(np.abs(values[j] - query) <= LEVEL_TOL + 1e-9, j, -1)


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
    log_time: np.ndarray | None = None  # shapes x variants log of the measured time, 0 where not measured

    @staticmethod
    def of(points: Sequence[MeasuredPoint], variants: Sequence[str], valid: Validity) -> RegretKernel:
        cb, m = points[0].codebook, points[0].m
        names = tuple(variants)
        regret = np.zeros((len(points), len(names)))
        log_time = np.zeros((len(points), len(names)))
        measured = np.zeros((len(points), len(names)), dtype=bool)
        col = {v: j for j, v in enumerate(names)}
        for i, p in enumerate(points):
            times = p.times_us or {}
            best = min(times.values())
            for v, t in times.items():
                if v not in col:  # a variant left out of the candidates (its time still sets the best)
                    continue
                regret[i, col[v]] = t / best - 1.0
                log_time[i, col[v]] = math.log(t)
                measured[i, col[v]] = True
        valid_at = np.array([[valid(v, cb, p.m, p.n, p.k) for v in names] for p in points], dtype=bool)
        return RegretKernel(
            cb, m, names, np.log2([p.n for p in points]), np.log2([p.k for p in points]),
            regret, measured, valid_at, log_time,
        )  # fmt: skip

    def _cover(self, weight: np.ndarray, den: np.ndarray) -> np.ndarray:
        """queries x variants: the share of the weight of the training shapes where a variant can run
        (valid_at) that it was measured under. Of all the weight, a variant whose restriction holds at
        every other K row only (RG16 KB4: K % 1024) fell under MIN_COVER between its measured rows."""
        return den / np.maximum(weight @ self.valid_at, 1e-300)

    def _scores(
        self, weight: np.ndarray, dn: np.ndarray | None = None, dk: np.ndarray | None = None
    ) -> np.ndarray:
        """queries x variants predicted regret (inf below MIN_COVER) from queries x shapes weights; with
        ``dn``, ``dk`` (queries x shapes: each training shape's log2 offset from the query) the linear
        estimator's intercept, else the weighted mean."""
        den = weight @ self.measured
        cover = self._cover(weight, den)
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

    def _additive(self, weight: np.ndarray, qn: np.ndarray, qk: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """queries x variants predicted log time, inf where not a candidate (not ``valid``, or under
        MIN_COVER): per query and variant the weighted ridge fit of the measured log times on [1, dn,
        dk, one effect per measured N, one per measured K]; the intercept plus the query's own N and K
        effects answers.

        Vectorised over queries and variants: a measured (N, K) shape lies in one N and one K level,
        so every block of the normal equations is a weighted sum over the shapes of a level (the N x N
        and K x K blocks diagonal, N x K one entry per shape). A level (a shape) with under
        LEVEL_MIN_WEIGHT of the nearest shape's weight at every query of a batch is left out of the
        batch's fit: LEVEL_RIDGE holds its effect at ~0 anyway. Variants measured at the same shapes
        have the same normal equations but for their right-hand sides: one gram per such set and
        query, solved for all of them at once (5-7 sets of 30-42 timed variants per M key on the dense
        H200 recording; a gram per variant made the emitted tree cost 13 s a fit there, 4.5 s now)."""
        assert self.log_time is not None
        nvals, ni = np.unique(self.log_n, return_inverse=True)
        kvals, ki = np.unique(self.log_k, return_inverse=True)
        qi, qj = _level(nvals, qn), _level(kvals, qk)
        cover = self._cover(weight, weight @ self.measured)
        candidate = valid & (cover >= MIN_COVER) & self.measured.any(axis=0)
        out = np.full((len(qn), len(self.variants)), np.inf)
        on_all, ok_all = np.eye(len(nvals))[ni], np.eye(len(kvals))[ki]  # shapes x levels indicators
        for lo in range(0, len(qn), ADDITIVE_CHUNK):
            rows = slice(lo, lo + ADDITIVE_CHUNK)
            cols = np.flatnonzero(candidate[rows].any(axis=0))
            if not len(cols):
                continue
            heavy = weight[rows].max(axis=0)
            shapes = np.flatnonzero(heavy >= LEVEL_MIN_WEIGHT)
            w = weight[rows][:, shapes]
            on, ok = on_all[shapes], ok_all[shapes]
            keep_n, keep_k = np.flatnonzero(on.any(axis=0)), np.flatnonzero(ok.any(axis=0))
            on, ok = on[:, keep_n], ok[:, keep_k]
            nl, kl = len(keep_n), len(keep_k)
            size = 3 + nl + kl
            feats = (
                np.ones_like(w),
                self.log_n[shapes][None, :] - qn[rows, None],
                self.log_k[shapes][None, :] - qk[rows, None],
            )
            diag_n, diag_k = 3 + np.arange(nl), 3 + nl + np.arange(kl)
            at_n, at_k = 3 + on.argmax(axis=1), 3 + nl + ok.argmax(axis=1)  # one shape, one (N, K) entry
            log_time = self.log_time[np.ix_(shapes, cols)]
            masks, group = np.unique(self.measured[np.ix_(shapes, cols)], axis=1, return_inverse=True)
            beta = np.empty((len(w), len(cols), size))
            for g in range(masks.shape[1]):  # variants measured at the same shapes share their gram
                members = np.flatnonzero(group.ravel() == g)
                wm = w * masks[:, g][None, :]  # batch x shapes
                y = log_time[:, members]  # shapes x variants (0 where not measured: wm is 0 there)
                gram = np.zeros((len(w), size, size))
                rhs = np.zeros((len(w), size, len(members)))
                for a in range(3):
                    wa = wm * feats[a]
                    for b in range(a, 3):
                        gram[:, a, b] = gram[:, b, a] = (wa * feats[b]).sum(axis=1)
                    gram[:, a, 3 : 3 + nl] = wa @ on
                    gram[:, a, 3 + nl :] = wa @ ok
                    gram[:, 3:, a] = gram[:, a, 3:]
                    rhs[:, a] = wa @ y
                gram[:, diag_n, diag_n] = wm @ on + LEVEL_RIDGE
                gram[:, diag_k, diag_k] = wm @ ok + LEVEL_RIDGE
                gram[:, at_n, at_k] = gram[:, at_k, at_n] = wm
                gram[:, 0, 0] += 1e-9
                gram[:, 1, 1] += ADDITIVE_SLOPE_RIDGE
                gram[:, 2, 2] += ADDITIVE_SLOPE_RIDGE
                wy = wm[:, :, None] * y[None]  # batch x shapes x variants
                rhs[:, 3 : 3 + nl] = np.matmul(on.T, wy)
                rhs[:, 3 + nl :] = np.matmul(ok.T, wy)
                beta[:, members] = np.linalg.solve(gram, rhs).transpose(0, 2, 1)
            pred = beta[..., 0]
            for levels, kept, offset in ((qi[rows], keep_n, 3), (qj[rows], keep_k, 3 + nl)):
                slot = np.full(max(len(nvals), len(kvals)) + 1, -1)
                slot[kept] = np.arange(len(kept))
                at = np.where(levels >= 0, slot[levels], -1)
                hit = np.flatnonzero(at >= 0)
                pred[hit] += beta[hit, :, offset + at[hit]]
            out[lo : lo + len(w), cols] = np.where(candidate[rows][:, cols], pred, np.inf)
        return out

    def _estimate(
        self, weight: np.ndarray, qn: np.ndarray, qk: np.ndarray, valid: np.ndarray, method: str
    ) -> np.ndarray:
        """queries x variants predicted regret of ``method``, inf where not a candidate (not valid
        at the query or under MIN_COVER)."""
        if method == "additive":
            log_time = self._additive(weight, qn, qk, valid)
            low = np.min(log_time, axis=1, keepdims=True)
            return np.where(
                np.isfinite(log_time), np.expm1(log_time - np.where(np.isfinite(low), low, 0.0)), np.inf
            )
        if method == "linear":
            score = self._scores(weight, self.log_n[None, :] - qn[:, None], self.log_k[None, :] - qk[:, None])
        else:
            score = self._scores(weight)
        return np.where(valid, score, np.inf)

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
        return self._estimate(self._weights(qn, qk, *bandwidth), qn, qk, valid, method)

    def held_out(self, bandwidth: tuple[float, float], method: str = "constant") -> np.ndarray:
        """Per training shape, the regret of the argmin answered from the other shapes alone."""
        hn, hk = bandwidth
        d2 = ((self.log_n[:, None] - self.log_n[None, :]) / hn) ** 2
        d2 = d2 + ((self.log_k[:, None] - self.log_k[None, :]) / hk) ** 2
        np.fill_diagonal(d2, np.inf)
        low = d2.min(axis=1, keepdims=True)
        weight = np.exp(-(d2 - np.where(np.isfinite(low), low, 0.0)) / 2)
        score = self._estimate(weight, self.log_n, self.log_k, self.valid_at, method)
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
    """The regret tree of the model's labels on a (M, N, K) grid: what a table emits.

    A variant is a candidate at a grid point only where it is valid at every K the point's leaf may
    answer (grid_validity). Where a timed variant's restriction is on K's divisibility (k_moduli), K
    runs over every multiple of K_QUANTUM up to QUANTUM_BEYOND octaves above the training range
    (quantum_ks; a real K is one) and the tree may also split on K % q up to that top (KModFeature):
    below it every real K is a grid point, above it the feature is constant. Then the model's own
    argmin is grafted at the unmeasured crossings of measured N and K (graft_crossings)."""
    ns_all = [round(2**x) for kern in model.kernels.values() for x in kern.log_n]
    ks_all = [round(2**x) for kern in model.kernels.values() for x in kern.log_k]
    ns = sorted({*grid_values(ns_all, GRID_BEYOND, GRID_BEYOND, GRID_STEP), *ns_all})
    top = round(max(ks_all) * 2**QUANTUM_BEYOND) // K_QUANTUM * K_QUANTUM
    moduli = set()
    for m, kern in model.kernels.items():
        timed = [kern.variants[j] for j in np.flatnonzero(kern.measured.any(axis=0))]
        moduli.update(k_moduli(model.valid, model.codebook, [m], timed, ns[0], top))
    ks = grid_values(ks_all, GRID_BEYOND, GRID_BEYOND, GRID_STEP)
    if moduli:  # a variant runs at some multiples of 256 only: the grid holds each (quantum_ks)
        ks = quantum_ks(ks, K_QUANTUM, top)
    extra = [KModFeature(q, top).name for q in sorted(moduli)]
    return graft_crossings(model, _grid_tree(model, ns, domain_ks(ks), extra))


def crossings(kernel: RegretKernel) -> list[tuple[int, int]]:
    """The (N, K) a measured N and a measured K cross at that no training point measured: where the
    additive estimator has both its effects, a held-out shape of a measured grid always lies."""
    ns = sorted({round(2**x) for x in kernel.log_n})
    ks = sorted({round(2**x) for x in kernel.log_k})
    shapes = {(round(2**a), round(2**b)) for a, b in zip(kernel.log_n, kernel.log_k, strict=True)}
    return [(n, k) for n in ns for k in ks if (n, k) not in shapes]


def graft_crossings(model: NeighbourModel, tree: FallbackTree) -> FallbackTree:
    """The tree with the model's own argmin grafted at every crossing (crossings) where the tree
    answers another variant that the model predicts over GRAFT_MIN off: the leaf holding the point
    becomes a subtree that gives exactly that (M, N, K) its answer and leaves every other point to the
    leaf. The additive estimator's answer at a crossing often holds there alone (an N effect and a K
    effect together, 1/16 octave wide each): a pocket of a few grid points that the greedy tree,
    out of depth, merged away (on the dense H200 recording its tree lost 0.9% mean held-out regret
    to its argmin). The model's answer there is valid (the package's restrictions at that point)."""
    root = tree.root
    for m, kern in sorted(model.kernels.items()):
        points = crossings(kern)
        if not points:
            continue
        ok = np.array(
            [[model.valid(v, model.codebook, m, n, k) for v in kern.variants] for n, k in points], dtype=bool
        ).reshape(len(points), len(kern.variants))
        score = kern.predict(
            [n for n, _ in points], [k for _, k in points], model.bandwidth, ok, model.method
        )
        for (n, k), row in zip(points, score, strict=True):
            if not np.isfinite(row).any():
                continue
            best = kern.variants[int(np.argmin(row))]
            answer = root.answer(m, n, k)
            at = {v: j for j, v in enumerate(kern.variants)}.get(answer)
            if answer != best and (at is None or not np.isfinite(row[at]) or row[at] > GRAFT_MIN):
                root = _graft(root, m, n, k, best)
    return FallbackTree(tree.codebook, tree.ms, root, tree.max_depth, tree.min_leaf)


def _graft(node: TreeNode, m: int, n: int, k: int, variant: str) -> TreeNode:
    """``node`` with the leaf holding (m, n, k) split so that exactly that point answers ``variant``."""
    if node.variant is None:
        assert node.left is not None and node.right is not None
        if feature_value(node.feature, m, n, k) <= node.threshold:
            return replace(node, left=_graft(node.left, m, n, k, variant))
        return replace(node, right=_graft(node.right, m, n, k, variant))
    inner = TreeNode(variant, points=1, regret=0.0, best=variant)
    for feature, value in (("k", k), ("n", n), ("m", m)):  # value - 1 < x <= value: x == value
        inner = TreeNode(
            None,
            feature,
            value - 1,
            node,
            TreeNode(None, feature, value, inner, node, 1, 0.0, node.best),
            1,
            0.0,
            node.best,
        )
    return inner


def _variants(model: NeighbourModel) -> list[str]:
    return sorted({v for kern in model.kernels.values() for v in kern.variants})


def _grid_tree(model: NeighbourModel, ns: list[int], ks: list[int], extra: list[str]) -> FallbackTree:
    names = _variants(model)
    col = {v: j for j, v in enumerate(names)}
    parts, bases = [], []
    for m, kern in model.kernels.items():
        qn = np.repeat(ns, len(ks))
        qk = np.tile(ks, len(ns))
        timed = np.flatnonzero(kern.measured.any(axis=0))  # the others are never candidates
        ok = np.zeros((len(ns) * len(ks), len(kern.variants)), dtype=bool)
        ok[:, timed] = grid_validity(
            model.valid, model.codebook, m, [kern.variants[j] for j in timed], ns, ks
        ).reshape(len(ns) * len(ks), len(timed))
        score = kern.predict(qn.tolist(), qk.tolist(), model.bandwidth, ok, model.method)
        keep = np.isfinite(score).any(axis=1)
        matrix = np.full((int(keep.sum()), len(names)), MISSING_COST)
        cols = [col[v] for v in kern.variants]
        matrix[:, cols] = np.where(np.isfinite(score[keep]), score[keep], MISSING_COST)
        parts.append(matrix)
        bases.append(np.column_stack([np.full(int(keep.sum()), m), qn[keep], qk[keep]]).astype(np.int64))
    matrix = np.concatenate(parts)
    labelled = np.flatnonzero((matrix < MISSING_COST).any(axis=0))  # never a candidate: never a leaf
    matrix, names = matrix[:, labelled], [names[j] for j in labelled]
    winners = np.argmin(matrix, axis=1)
    wins = {names[j]: int(c) for j, c in zip(*np.unique(winners, return_counts=True), strict=True)}
    root = fit_tree_matrix(
        matrix, names, np.concatenate(bases), wins, TREE_DEPTH, 1, min_gain=MIN_GAIN, grow_through=True,
        extra_features=extra, validity=model.valid, codebook=model.codebook,
    )  # fmt: skip
    return FallbackTree(model.codebook, tuple(sorted(model.kernels)), root, TREE_DEPTH, 1)
