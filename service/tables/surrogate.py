"""The third fallback policy: a per-variant time model labels a dense synthetic grid, a tree learns it.

Why: on real H200 sweeps a tree or segments fitted on the measured shapes alone cannot answer a
shape between grid neighbours whose best split-K depth differs by a step (each step costs 15-40%),
and the LM head lies 10x beyond every other N. A model of every variant's time interpolates
between shapes instead of copying a neighbour's winner.

Model (fitted per M key, pooled over codebooks): at a query (n, k) a Gaussian-weighted local
linear regression in (log2 n, log2 k) (bandwidth BANDWIDTH octaves, the query clamped into the
training range so nothing extrapolates linearly) of log time on, per variant, an intercept and two
slopes, plus a ridge-shrunk per-(codebook, variant) offset, plus shared coefficients on the
variant's launch-geometry covariates where the variant space has a known geometry (see
``kbtw_geometry``: wave quantisation of the grid and of rows per wave). The argmin of the predicted
times is the model's answer.

Table: the model labels a grid of (M, N, K) (log2 N and log2 K every GRID_STEP octave over the
training range and beyond it) with each variant's predicted time; a regret tree
(service.tables.tree.fit_tree, grown through zero-gain cuts, then pruned where a subtree does not
lower the predicted regret by MIN_GAIN) compresses it into nested integer comparisons, so every
dialect renders it as its decision tree: the lookup stays integer-exact. Without a known geometry a
label is the mean over its cell's N and the tree reads M, N, K. With the KB/TW geometry the grid is
dense in N (EXACT_N_STEP), labelled at each exact N, and the tree may also split on the launch rounds
of the winning variants (service.tables.tree.RoundsFeature; integer, evaluated by the C++ and json
dialects), since the wave quantisation flips every few percent of N, finer than cuts on N follow.
Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from service.tables.model import MeasuredPoint
from service.tables.tree import MISSING_COST, FallbackTree, RoundsFeature, fit_tree_matrix
from service.tables.validity import Validity, always_valid, domain_ks, grid_validity

BANDWIDTH = 1.2  # octaves of N and K: chosen by leave-one-shape-out on the H200 sweep (1.0-1.5 within 0.1%)
SLOPE_RIDGE = 0.01  # shrinks the per-variant slopes where few neighbours carry weight
CODEBOOK_RIDGE = 1.0  # shrinks a codebook's per-variant offset toward the pooled fit
MIN_WEIGHT = 1e-4  # training shapes weighted below this (relative) are left out of a local fit
GRID_STEP = 0.25  # octaves between synthetic grid values of N and K
EXACT_N_STEP = 1 / 16  # octaves between grid values of N when labels are exact (rounds features)
CELL_SAMPLES = 8  # N values a grid label averages over (one grid step wide)
GRID_BEYOND_N = 4.0  # octaves of N above the largest measured (LM heads lie far beyond the layers)
TREE_DEPTH = 14
MIN_GAIN = 0.001  # a tree split must lower its node's mean predicted regret by this much

# (variant, n, k) -> covariates; None: no geometry known, the model interpolates times alone.
Geometry = Callable[[str, int, int], tuple[float, ...]]
# One labelled stretch of a synthetic grid: (M, N values, K, variants, N x variants predicted times).
GridBlock = tuple[int, np.ndarray, int, tuple[str, ...], np.ndarray]


class KbTwGeometry:
    """Wave-quantisation covariates of Llaminar's KB/TW decode launch (the tb-decode KB/TW package's
    [derived] expressions): rows per wave ``max(1, ceil(n / max(1, tw*cus // kb)))``, groups
    ``ceil(n / (rows_per_wave * 256/wave))``, grid = groups x kb blocks run in rounds of
    ``cus * resident_blocks`` (3: the TW = 24 launch bound that wins almost everywhere). The two
    covariates are log(quantised / continuous) of the rounds and of rows per wave: how much work
    the integer geometry adds over the smooth trend the interpolation sees. The same rounds, as
    integer RoundsFeature values, are what the emitted tree may split on."""

    def __init__(self, cus: int, wave: int, resident_blocks: int = 3) -> None:
        self.cus, self.wave, self.resident = cus, wave, resident_blocks
        self.rows_per_block = max(1, 256 // wave)

    def __call__(self, variant: str, n: int, k: int) -> tuple[float, ...]:
        row = self.matrix([variant], np.array([n]))[0, 0]
        return (float(row[0]), float(row[1]))

    def matrix(self, variants: Sequence[str], ns: np.ndarray) -> np.ndarray:
        """len(ns) x variants x 2 covariates, vectorised over N (K does not enter the geometry)."""
        kb, tw = (np.array([int(v.split("/")[i][2:]) for v in variants], dtype=np.int64) for i in (0, 1))
        n = np.asarray(ns, dtype=np.int64)[:, None]
        per = np.maximum(1, tw * self.cus // kb)[None, :]
        rpw = np.maximum(1, -(-n // per))
        groups = -(-n // (rpw * self.rows_per_block))
        slots = self.cus * self.resident
        rounds = -(-(groups * kb[None, :]) // slots)
        rpw_c = np.maximum(1.0, n / per)
        rounds_c = np.maximum(1.0, n * kb[None, :] / (rpw_c * self.rows_per_block) / slots)
        return np.stack([np.log(rounds / rounds_c), np.log(rpw / rpw_c)], axis=-1)

    def features(self, variants: Sequence[str]) -> list[str]:
        """RoundsFeature names of the variants' distinct (KB, TW) launches."""
        pairs = sorted({tuple(int(part[2:]) for part in v.split("/")) for v in variants})
        return [RoundsFeature(kb, tw, self.cus, self.rows_per_block, self.resident).name for kb, tw in pairs]


def kbtw_geometry(cus: int, wave: int, resident_blocks: int = 3) -> KbTwGeometry:
    """The KB/TW geometry of an arch with ``cus`` CUs / SMs of ``wave`` lanes."""
    return KbTwGeometry(cus, wave, resident_blocks)


def geometry_for(variants: Sequence[str], arch: str | None) -> Geometry | None:
    """The KB/TW geometry when every variant is a KB/TW name and the arch is a known GPU; else None."""
    from service.tables.codecs import DecodeCodec

    if arch is None or not variants:
        return None
    try:
        for v in variants:
            DecodeCodec().parse_variant(v)
        from kernels.arches import get_arch

        spec = get_arch(arch)
    except (ValueError, KeyError):
        return None
    return KbTwGeometry(spec.cus, spec.wave) if spec.backend != "host" and spec.wave > 1 else None


class TimeModel:
    """Training data of one M key, laid out once; each query solves one weighted ridge regression."""

    def __init__(
        self,
        points: Sequence[MeasuredPoint],
        variants: Sequence[str],
        codebooks: Sequence[int],
        geometry: Geometry | None,
    ) -> None:
        self.variants = tuple(variants)
        self.codebooks = tuple(codebooks)
        self.geometry = geometry
        index = {v: j for j, v in enumerate(self.variants)}
        cbi = {cb: i for i, cb in enumerate(self.codebooks)}
        self.log_n = np.log2([p.n for p in points])
        self.log_k = np.log2([p.k for p in points])
        pairs = [
            (i, index[v], cbi[p.codebook], v, t)
            for i, p in enumerate(points)
            for v, t in (p.times_us or {}).items()
        ]
        nv, nc = len(self.variants), len(self.codebooks)
        self.ng = len(geometry(self.variants[0], points[0].n, points[0].k)) if geometry else 0
        self.width = 3 * nv + nc * nv + self.ng
        self.point = np.array([i for i, *_ in pairs])
        self.var = np.array([j for _, j, *_ in pairs])
        self.design = np.zeros((len(pairs), self.width))
        rows = np.arange(len(pairs))
        self.design[rows, 3 * self.var] = 1.0
        self.design[rows, 3 * nv + np.array([c for _, _, c, _, _ in pairs]) * nv + self.var] = 1.0
        if isinstance(geometry, KbTwGeometry):  # vectorised: one matrix over the points' N
            geo = geometry.matrix(self.variants, np.array([p.n for p in points]))
            self.design[:, 3 * nv + nc * nv :] = geo[self.point, self.var]
        elif geometry:
            self.design[:, 3 * nv + nc * nv :] = [
                geometry(v, points[i].n, points[i].k) for i, _, _, v, _ in pairs
            ]
        self.log_t = np.log([t for *_, t in pairs])
        # Each row has at most 4 + ng non-zeros (intercept, two slopes, codebook offset, covariates):
        # their columns, for assembling the normal equations sparsely in _solve.
        cb_col = 3 * nv + np.array([c for _, _, c, _, _ in pairs], dtype=np.int64) * nv + self.var
        geo_cols = np.arange(3 * nv + nc * nv, self.width)
        self.columns = np.column_stack(
            [3 * self.var, 3 * self.var + 1, 3 * self.var + 2, cb_col, *([g] * len(pairs) for g in geo_cols)]
        ).astype(np.int64)
        self.geo_values = self.design[:, geo_cols]
        self._pairs = np.triu_indices(self.columns.shape[1])
        self.ridge = np.full(self.width, 1e-6)  # every column, so an all-zero one (a flat covariate) solves
        self.ridge[1 : 3 * nv : 3] = self.ridge[2 : 3 * nv : 3] = SLOPE_RIDGE
        self.ridge[3 * nv : 3 * nv + nc * nv] = CODEBOOK_RIDGE
        self._cache: dict[tuple[float, float], np.ndarray] = {}
        self._geo_cache: dict[tuple[int, int], np.ndarray] = {}
        self._exact_geo: dict[tuple[int, ...], np.ndarray] = {}  # KB/TW covariates at a grid's N

    def predict(self, n: int, k: int, spread: float = 0.0) -> dict[int, dict[str, float]]:
        """Predicted time (us) of every variant per codebook at (n, k).

        ``spread`` > 0 (grid labels): each variant's mean predicted time over CELL_SAMPLES values of N
        spanning ``spread`` octaves around n. The geometry's wave quantisation flips every few percent
        of N, far finer than any grid, so a label stands for its whole cell. (The minimax label, the
        worst regret over the cell, did worse held out on the H200 sweep: 27% vs 10-60% at the
        K = 16384 shapes, where the best variant's one-round grid is exactly what the cell blurs.)"""
        qn = min(max(math.log2(n), float(self.log_n.min())), float(self.log_n.max()))
        qk = min(max(math.log2(k), float(self.log_k.min())), float(self.log_k.max()))
        beta = self._cache.get((qn, qk))
        if beta is None:
            beta = self._cache[(qn, qk)] = self._solve(qn, qk)
        nv, nc = len(self.variants), len(self.codebooks)
        base = beta[0 : 3 * nv : 3]
        if self.geometry is None:
            samples = np.zeros((1, nv))
        else:
            coef = beta[3 * nv + nc * nv :]
            ns = [n]
            if spread > 0:
                steps = range(CELL_SAMPLES)
                ns = sorted(
                    {max(1, round(n * 2 ** (spread * (j / (CELL_SAMPLES - 1) - 0.5)))) for j in steps}
                )
            samples = np.array([self._covariates(m, k) @ coef for m in ns])
        out: dict[int, dict[str, float]] = {}
        for c, cb in enumerate(self.codebooks):
            log_t = base + beta[3 * nv + c * nv : 3 * nv + (c + 1) * nv] + samples  # samples x variants
            values = np.exp(log_t).mean(axis=0)
            out[cb] = dict(zip(self.variants, values.tolist(), strict=True))
        return out

    def predict_exact(self, ns: Sequence[int], k: int) -> dict[int, np.ndarray]:
        """Per codebook, len(ns) x variants predicted times at each exact N (no cell mean): the grid
        labels a tree with RoundsFeature splits learns from, so the quantisation must stay in them.
        The smooth local fit is solved at N snapped to the GRID_STEP lattice (it changes little
        within a step; the geometry, evaluated at every N, is what changes)."""
        nv, nc = len(self.variants), len(self.codebooks)
        out = {cb: np.empty((len(ns), nv)) for cb in self.codebooks}
        lo, hi = float(self.log_n.min()), float(self.log_n.max())
        qk = min(max(math.log2(k), float(self.log_k.min())), float(self.log_k.max()))
        snapped: dict[float, list[int]] = {}
        for i, n in enumerate(ns):
            qn = min(max(round(math.log2(n) / GRID_STEP) * GRID_STEP, lo), hi)
            snapped.setdefault(qn, []).append(i)
        covariates = None
        if isinstance(self.geometry, KbTwGeometry):  # independent of K: once per grid, not per K
            key = tuple(int(n) for n in ns)
            covariates = self._exact_geo.get(key)
            if covariates is None:
                covariates = self._exact_geo[key] = self.geometry.matrix(self.variants, np.array(key))
        for qn, rows in snapped.items():
            beta = self._cache.get((qn, qk))
            if beta is None:
                beta = self._cache[(qn, qk)] = self._solve(qn, qk)
            at = np.array([ns[i] for i in rows])
            if self.geometry is None:
                geo = np.zeros((len(rows), nv))
            elif covariates is not None:
                geo = covariates[rows] @ beta[3 * nv + nc * nv :]
            else:
                geo = np.array([self._covariates(int(n), k) for n in at]) @ beta[3 * nv + nc * nv :]
            for c, cb in enumerate(self.codebooks):
                out[cb][rows] = np.exp(
                    beta[0 : 3 * nv : 3] + beta[3 * nv + c * nv : 3 * nv + (c + 1) * nv] + geo
                )
        return out

    def _covariates(self, n: int, k: int) -> np.ndarray:
        """variants x covariates at (n, k), memoised (grid cells share their N samples)."""
        found = self._geo_cache.get((n, k))
        if found is None:
            assert self.geometry is not None
            found = self._geo_cache[(n, k)] = np.array([self.geometry(v, n, k) for v in self.variants])
        return found

    def _solve(self, qn: float, qk: float) -> np.ndarray:
        """The local fit at (log2 n, log2 k) = (qn, qk), inside the training range."""
        dn, dk = self.log_n - qn, self.log_k - qk
        d2 = dn * dn + dk * dk
        weight = np.exp(-(d2 - d2.min()) / (2 * BANDWIDTH * BANDWIDTH))  # nearest shape 1: never all zero
        keep = weight[self.point] >= MIN_WEIGHT
        pt = self.point[keep]
        n_rows = len(pt)
        values = np.empty((n_rows, self.columns.shape[1]))  # the non-zeros of each kept design row
        values[:, 0] = 1.0
        values[:, 1] = dn[pt]
        values[:, 2] = dk[pt]
        values[:, 3] = 1.0
        values[:, 4:] = self.geo_values[keep]
        cols = self.columns[keep]
        w = weight[pt]
        # A^T W A and A^T W y from the non-zeros alone (the dense product spent ~2 ms per query on zeros)
        a, b = self._pairs  # each unordered pair of a row's non-zeros once; mirrored below
        pair_index = (cols[:, a] * self.width + cols[:, b]).ravel()
        pair_value = (values[:, a] * (values[:, b] * w[:, None])).ravel()
        half = np.bincount(pair_index, pair_value, self.width * self.width).reshape(self.width, self.width)
        normal = half + np.triu(half, 1).T + np.tril(half, -1).T
        rhs = np.bincount(cols.ravel(), (values * (w * self.log_t[keep])[:, None]).ravel(), self.width)
        return np.asarray(np.linalg.solve(normal + np.diag(self.ridge), rhs))


def candidate_variants(
    points: Sequence[MeasuredPoint], validity: Validity = always_valid
) -> dict[int, tuple[str, ...]]:
    """The variants the model may answer per codebook: with a known validity every timed variant
    (the validity rules out those that cannot run at a query), else the complete ones."""
    if validity is always_valid:
        return complete_variants(points)
    out: dict[int, set[str]] = {}
    for p in points:
        out.setdefault(p.codebook, set()).update(p.times_us or {})
    return {cb: tuple(sorted(v)) for cb, v in sorted(out.items())}


def complete_variants(points: Sequence[MeasuredPoint]) -> dict[int, tuple[str, ...]]:
    """Per codebook, the variants parity-passing (timed) at every one of its points: the only ones the
    model may answer (a variant failing somewhere may fail at an unseen shape too). Falls back to every
    timed variant where no variant is complete."""
    out: dict[int, tuple[str, ...]] = {}
    for cb in sorted({p.codebook for p in points}):
        sets = [set(p.times_us or {}) for p in points if p.codebook == cb]
        common = set.intersection(*sets) if sets else set()
        out[cb] = tuple(sorted(common or set.union(*sets)))
    return out


def fit_models(points: Sequence[MeasuredPoint], geometry: Geometry | None) -> dict[int, TimeModel]:
    """One TimeModel per M key, pooled over codebooks."""
    models: dict[int, TimeModel] = {}
    for m in sorted({p.m for p in points}):
        group = tuple(p for p in points if p.m == m and p.times_us)
        if not group:
            continue
        variants = tuple(sorted({v for p in group for v in p.times_us or {}}))
        models[m] = TimeModel(group, variants, tuple(sorted({p.codebook for p in group})), geometry)
    return models


def model_answer(
    models: dict[int, TimeModel], allowed: dict[int, tuple[str, ...]], validity: Validity = always_valid
) -> Callable[[MeasuredPoint], str | None]:
    """The model's own argmin (no grid, no tree) over the allowed variants valid at the point: what the
    inner held-out score judges."""

    def answer(p: MeasuredPoint) -> str | None:
        model = models.get(p.m)
        if model is None or p.codebook not in allowed or p.n <= 0 or p.k <= 0:
            return None
        times = model.predict(p.n, p.k).get(p.codebook)
        if not times:
            return None
        candidates = [v for v in allowed[p.codebook] if v in times and validity(v, p.codebook, p.m, p.n, p.k)]
        return min(candidates, key=lambda v: (times[v], v)) if candidates else None

    return answer


def grid_values(values: Sequence[int], below: float, above: float, step: float = GRID_STEP) -> list[int]:
    """Log-spaced values ``step`` octaves apart over the training range widened by ``below`` and
    ``above`` octaves (beyond the range the model is clamped, only the geometry changes)."""
    lo, hi = math.log2(min(values)) - below, math.log2(max(values)) + above
    steps = math.floor((hi - lo) / step)
    grid = {round(2 ** (lo + i * step)) for i in range(steps + 1)}
    return sorted(grid)


def rounds_rises(geometry: KbTwGeometry, variants: Sequence[str], lo: int, hi: int) -> list[int]:
    """Every N in [lo, hi] at which one of ``variants`` launches one more round than at N - 1.

    Such windows of extra rounds are often only a few N wide (KB8/TW24 on the H200: 5097..5148), far
    narrower than any log-spaced grid step, so a grid alone may hold no label inside them and the tree
    never learns to leave the variant there; with these N in the grid, every window is labelled."""
    if hi < lo:
        return []
    ns = np.arange(max(1, lo - 1), hi + 1, dtype=np.int64)
    out: set[int] = set()
    for feature in geometry.features(variants):
        rounds = RoundsFeature.parse(feature)
        assert rounds is not None
        per = max(1, rounds.tw * rounds.cus // rounds.kb)
        if -(-per // rounds.rows) * rounds.kb <= rounds.cus * rounds.resident:
            continue  # at most ceil(per / rows) groups of kb blocks: never a second round
        rows_per_wave = np.maximum(1, -(-ns // per))
        blocks = -(-ns // (rows_per_wave * rounds.rows)) * rounds.kb
        r = -(-blocks // (rounds.cus * rounds.resident))
        out.update(int(n) for n in ns[1:][r[1:] > r[:-1]] if n >= lo)
    return sorted(out)


def _grid_labels(
    models: dict[int, TimeModel],
    allowed: dict[int, tuple[str, ...]],
    ns: Sequence[int],
    ks: Sequence[int],
    exact: bool,
    validity: Validity = always_valid,
) -> dict[int, list[GridBlock]]:
    """Per codebook, blocks (M, N values, K, variants, N x variants predicted times) of the grid; a
    variant not valid at a grid point and its grid neighbours (grid_validity) is timed inf there."""
    out: dict[int, list[GridBlock]] = {cb: [] for cb in allowed}
    for m, model in models.items():
        masks = (
            {}
            if validity is always_valid
            else {cb: grid_validity(validity, cb, m, model.variants, ns, ks) for cb in model.codebooks}
        )
        for ki, k in enumerate(ks):
            if exact:
                labels = model.predict_exact(ns, k)
            else:
                cells = [model.predict(n, k, GRID_STEP) for n in ns]
                labels = {
                    cb: np.array([[c[cb][v] for v in model.variants] for c in cells])
                    for cb in model.codebooks
                }
            for cb, times in labels.items():
                if cb in masks:
                    times = np.where(masks[cb][:, ki, :], times, np.inf)
                keep = [j for j, v in enumerate(model.variants) if v in set(allowed.get(cb, ()))]
                if keep:
                    variants = tuple(model.variants[j] for j in keep)
                    out.setdefault(cb, []).append((m, np.asarray(ns), k, variants, times[:, keep]))
    return out


def _rise_blocks(
    models: dict[int, TimeModel],
    cb: int,
    allowed: Sequence[str],
    blocks: Sequence[GridBlock],
    rises: dict[str, list[int]],
) -> list[GridBlock]:
    """Labels at the N where a variant's rounds rise, per (M, K) of the grid only where that variant
    wins at a neighbouring grid N: the windows that can change an answer, not every window of every
    variant (those would crowd the grid's small N and pull the tree's splits there)."""
    out: list[GridBlock] = []
    for m, ns, k, variants, times in blocks:
        winners = np.array(variants)[np.argmin(times, axis=1)]
        grid = set(ns.tolist())
        picked: set[int] = set()
        for v, at in rises.items():
            for n in at:
                i = int(np.searchsorted(ns, n))
                near = winners[max(0, i - 1) : i + 1]
                if n not in grid and (near == v).any():
                    picked.add(n)
        if picked:
            out += _grid_labels({m: models[m]}, {cb: tuple(allowed)}, sorted(picked), [k], True).get(cb, [])
    return out


def _grid_tree(
    cb: int, blocks: list[GridBlock], extra: Sequence[str], validity: Validity = always_valid
) -> FallbackTree:
    """The regret tree of one codebook's labelled grid (fit_tree's rule, built from the arrays)."""
    names = sorted({v for *_, variants, _ in blocks for v in variants})
    col = {v: j for j, v in enumerate(names)}
    parts, bases, winners = [], [], np.zeros(len(names), dtype=np.int64)
    for m, ns, k, variants, times in blocks:
        regret = np.full((len(ns), len(names)), MISSING_COST)
        cols = [col[v] for v in variants]  # variants are sorted, so the first minimum is the name tie-break
        with np.errstate(invalid="ignore"):
            ratio = times / times.min(axis=1, keepdims=True) - 1.0
        regret[:, cols] = np.where(np.isfinite(ratio), ratio, MISSING_COST)  # inf: not valid there
        parts.append(regret)
        bases.append(np.column_stack([np.full(len(ns), m), ns, np.full(len(ns), k)]).astype(np.int64))
        np.add.at(winners, np.array(cols)[np.argmin(times, axis=1)], 1)
    wins = {names[j]: int(c) for j, c in enumerate(winners) if c}
    root = fit_tree_matrix(
        np.concatenate(parts), names, np.concatenate(bases), wins, TREE_DEPTH, 1,
        min_gain=MIN_GAIN, grow_through=True, extra_features=extra, validity=validity, codebook=cb,
    )  # fmt: skip
    return FallbackTree(cb, tuple(sorted({b[0] for b in blocks})), root, TREE_DEPTH, 1)


def fit_surrogate_trees(
    points: Sequence[MeasuredPoint], geometry: Geometry | None, validity: Validity = always_valid
) -> dict[int, FallbackTree]:
    """Per codebook, the regret tree fitted on the model-labelled synthetic grid.

    With a KbTwGeometry the grid is dense in N (EXACT_N_STEP octaves), labelled at each exact N, and
    the tree may also split on the launch rounds (RoundsFeature) of every variant that wins somewhere
    on the grid: the quantisation stays in the labels and the tree can follow it. The grid then also
    holds, per (M, K), each N at which a winner's rounds rise (rounds_rises) next to grid N where that
    variant wins, labelled alike, so each narrow window of an extra round that matters carries labels.
    Otherwise (no known geometry) labels are cell means on the GRID_STEP grid and the tree reads M, N,
    K only."""
    models = fit_models(points, geometry)
    allowed = candidate_variants(points, validity)
    exact = isinstance(geometry, KbTwGeometry)
    ns = grid_values([p.n for p in points], 1.0, GRID_BEYOND_N, EXACT_N_STEP if exact else GRID_STEP)
    ks = grid_values([p.k for p in points], 1.0, 1.0)
    if validity is not always_valid:
        ks = domain_ks(ks)
    labelled = _grid_labels(models, allowed, ns, ks, exact, validity)
    trees: dict[int, FallbackTree] = {}
    for cb, blocks in labelled.items():
        if not blocks:
            continue
        extra: list[str] = []
        if isinstance(geometry, KbTwGeometry):
            won = sorted({b[3][j] for b in blocks for j in np.unique(np.argmin(b[4], axis=1)).tolist()})
            extra = geometry.features(won)
            top = min(ns[-1], 2 * max(p.n for p in points))  # the measured range and one octave beyond
            rises = {v: rounds_rises(geometry, [v], ns[0], top) for v in won}
            blocks = blocks + _rise_blocks(models, cb, allowed[cb], blocks, rises)
        trees[cb] = _grid_tree(cb, blocks, extra, validity)
    return trees
