"""A regret-minimising decision tree over log2 M, N, K: the other fallback a codebook may take.

Llaminar's CUDA decode heuristic relabels each shape with a set-cover "master config" and fits a
classification tree over (log2 M, log2 N, log2 K). Here the tree is grown on regret directly: a
leaf takes the variant with the least total regret over its points (every variant's measured time
counts, not only the winner's), a split is kept only when it lowers the total, and depth and leaf
size are chosen by grouped cross-validation over shapes like the work-size segments are.

Splits on log2 of an integer feature are exact integer comparisons: between neighbouring values
``a < b`` the cut ``log2 x <= (log2 a + log2 b) / 2`` is ``x <= floor(sqrt(a * b))``, so C++ and
Python answer identically without floating point. Pure functions over plain data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from service.tables.model import MeasuredPoint
from service.tables.validity import DomainValidity, Validity, always_valid, domain_of

FEATURES: tuple[str, ...] = ("m", "n", "k")
_ROUNDS_RE = re.compile(r"^rounds_kb(\d+)_tw(\d+)_cu(\d+)_r(\d+)_b(\d+)$")
# A variant missing (not parity-passing) at a point costs this much there: never chosen for a leaf
# holding that point while any variant is complete.
MISSING_COST = 1e6
# A leaf that answers nothing (the engine keeps its own default): no variant of the table is valid in
# it (service.tables.validity). Variant names are never empty.
NO_ANSWER = ""
DEPTHS: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
MIN_LEAF: tuple[int, ...] = (1, 2, 4)  # points per leaf


@dataclass(frozen=True)
class RoundsFeature:
    """Launch rounds of a KB/TW decode grid at ``n``: an integer feature a tree may split on besides
    M, N, K, because the wave quantisation it encodes flips every few percent of N (e.g. 5120 x 17408
    on the H200: KB8/TW24 launches 400 blocks, 4 past the 396 resident, and loses 60%), far finer than
    cuts on N can follow. The KB/TW package's [derived] geometry: rows per wave
    ``max(1, ceil(n / max(1, tw * cus // kb)))``, blocks ``ceil(n / (rows_per_wave * rows)) * kb``,
    rounds ``ceil(blocks / (cus * resident))``. Integer arithmetic only, so every dialect (C++, json)
    evaluates it exactly; the name carries every constant, so a table needs nothing else."""

    kb: int
    tw: int
    cus: int
    rows: int  # rows per wave-group of a block: threads per block / wave
    resident: int  # blocks resident per CU / SM

    @property
    def name(self) -> str:
        return f"rounds_kb{self.kb}_tw{self.tw}_cu{self.cus}_r{self.rows}_b{self.resident}"

    def value(self, n: int) -> int:
        per = max(1, self.tw * self.cus // self.kb)
        rows_per_wave = max(1, -(-n // per))
        blocks = -(-n // (rows_per_wave * self.rows)) * self.kb
        return -(-blocks // (self.cus * self.resident))

    @staticmethod
    @lru_cache(maxsize=256)
    def parse(name: str) -> RoundsFeature | None:
        found = _ROUNDS_RE.match(name)
        if found is None:
            return None
        kb, tw, cus, rows, resident = (int(g) for g in found.groups())
        if min(kb, tw, cus, rows, resident) < 1:
            raise ValueError(f"feature {name!r}: every constant must be >= 1")
        return RoundsFeature(kb, tw, cus, rows, resident)


_KMOD_RE = re.compile(r"^k_mod_(\d+)_upto_(\d+)$")


@dataclass(frozen=True)
class KModFeature:
    """K % q up to K = ``upto`` (q beyond it): the divisibility of K a package restriction reads (RG16
    KB4: whole 1024-weight ring stages per K slice, K % 1024 == 0), which holds at every fourth
    multiple of 256. One split ``k_mod_1024_upto_H <= 0`` says so where cuts on K alone need two per
    such K (a depth-14 tree on the H200 grid left KB4 out at K = 7168, 43-50% off at M = 3, 4). Beyond
    ``upto`` (the top of a grid that holds every multiple of 256 below it) the value is constant, so
    a leaf there is a K interval of grid values whose validity the grid checked (grid_validity)."""

    q: int
    upto: int

    @property
    def name(self) -> str:
        return f"k_mod_{self.q}_upto_{self.upto}"

    def value(self, k: int) -> int:
        return k % self.q if k <= self.upto else self.q

    @staticmethod
    @lru_cache(maxsize=256)
    def parse(name: str) -> KModFeature | None:
        found = _KMOD_RE.match(name)
        if found is None:
            return None
        q, upto = int(found.group(1)), int(found.group(2))
        if q < 2:
            raise ValueError(f"feature {name!r}: the modulus must be >= 2")
        return KModFeature(q, upto)


def feature_value(name: str, m: int, n: int, k: int) -> int:
    """A tree feature at (M key, N, K): m, n, k, a KModFeature or a RoundsFeature by its name."""
    if name in FEATURES:
        return {"m": m, "n": n, "k": k}[name]
    kmod = KModFeature.parse(name)
    if kmod is not None:
        return kmod.value(k)
    rounds = RoundsFeature.parse(name)
    if rounds is None:
        raise ValueError(f"unknown tree feature {name!r}")
    return rounds.value(n)


@dataclass(frozen=True)
class TreeNode:
    """A leaf (``variant`` set) or a split: ``value(feature) <= threshold`` goes left."""

    variant: str | None = None
    feature: str = ""
    threshold: int = 0
    left: TreeNode | None = None
    right: TreeNode | None = None
    points: int = 0
    regret: float | None = None  # mean training regret at a leaf
    best: str = ""  # the variant this node takes as a leaf (kept on splits, for truncation)

    def answer(self, m: int, n: int, k: int) -> str:
        node = self
        while node.variant is None:
            assert node.left is not None and node.right is not None
            node = node.left if feature_value(node.feature, m, n, k) <= node.threshold else node.right
        return node.variant

    def features(self) -> set[str]:
        """Every feature a split reads (dialects emit helpers for the non-M/N/K ones)."""
        if self.variant is not None:
            return set()
        assert self.left is not None and self.right is not None
        return {self.feature} | self.left.features() | self.right.features()

    def leaves(self) -> int:
        if self.variant is not None:
            return 1
        assert self.left is not None and self.right is not None
        return self.left.leaves() + self.right.leaves()

    def depth(self) -> int:
        if self.variant is not None:
            return 0
        assert self.left is not None and self.right is not None
        return 1 + max(self.left.depth(), self.right.depth())

    def variants(self) -> set[str]:
        """The variants its leaves answer (NO_ANSWER leaves answer none)."""
        if self.variant is not None:
            return {self.variant} - {NO_ANSWER}
        assert self.left is not None and self.right is not None
        return self.left.variants() | self.right.variants()


@dataclass(frozen=True)
class FallbackTree:
    """One codebook's tree and the M keys it answers (others get no answer, like the segments)."""

    codebook: int
    ms: tuple[int, ...]
    root: TreeNode
    max_depth: int
    min_leaf: int

    def answer(self, m_key: int, n: int, k: int) -> str | None:
        if m_key not in self.ms or n <= 0 or k <= 0:
            return None
        return self.root.answer(m_key, n, k) or None  # NO_ANSWER: none


def split_threshold(a: int, b: int) -> int:
    """Integer cut between ``a < b`` at the midpoint of their log2 values."""
    return math.isqrt(a * b)


def regret_matrix(points: Sequence[MeasuredPoint], variants: Sequence[str]) -> np.ndarray:
    """points x variants regret for fitting (ties 0, missing MISSING_COST)."""
    from service.tables.fallback import regret_rows

    out = regret_rows(points, variants)
    out[np.isinf(out)] = MISSING_COST
    return out


def _order_key(variant: str, wins: dict[str, int]) -> tuple[int, str]:
    return (-wins.get(variant, 0), variant)


def _leaf(cost: np.ndarray, variants: Sequence[str], wins: dict[str, int]) -> int:
    """Least total regret; ties to the variant more points declared, then the name."""
    best = float(cost.min())
    tied = [j for j in range(len(variants)) if cost[j] <= best + 1e-12]
    return min(tied, key=lambda j: _order_key(variants[j], wins))


def fit_tree(
    points: Sequence[MeasuredPoint],
    max_depth: int,
    min_leaf: int,
    variants: Sequence[str] | None = None,
    min_gain: float = 0.0,
    grow_through: bool = False,
    extra_features: Sequence[str] = (),
    validity: Validity = always_valid,
) -> TreeNode:
    """Greedy top-down tree minimising total fitting regret; a split must lower its node's mean regret
    by more than ``min_gain`` (0: any decrease).

    ``grow_through``: a split is made even when it alone lowers nothing (a pocket inside both ranges
    needs two cuts before either pays; near-ties then cut at the middle row), and a subtree that in
    the end does not lower its node's regret by ``min_gain`` is pruned back to a leaf. For dense
    synthetic grids (service.tables.surrogate), where greedy one-cut gains miss such pockets.

    ``extra_features``: integer features beyond M, N, K (RoundsFeature, KModFeature names) a split
    may read.

    ``validity``: the package's restrictions; no leaf answers a variant they rule out anywhere on the
    domain grid inside it (keep_valid; the points are of one codebook)."""
    if not points:
        raise ValueError("a tree needs at least one point")
    names = sorted(
        variants or {v for p in points if p.times_us for v in p.times_us} | {p.winner for p in points}
    )
    wins: dict[str, int] = {}
    for p in points:
        wins[p.winner] = wins.get(p.winner, 0) + 1
    return fit_tree_matrix(
        regret_matrix(points, names),
        names,
        np.array([[p.m, p.n, p.k] for p in points], dtype=np.int64),
        wins,
        max_depth,
        min_leaf,
        min_gain,
        grow_through,
        extra_features,
        validity,
        points[0].codebook,
    )


def fit_tree_matrix(
    matrix: np.ndarray,
    names: Sequence[str],
    base: np.ndarray,
    wins: dict[str, int],
    max_depth: int,
    min_leaf: int,
    min_gain: float = 0.0,
    grow_through: bool = False,
    extra_features: Sequence[str] = (),
    validity: Validity = always_valid,
    codebook: int = 0,
) -> TreeNode:
    """fit_tree over arrays: ``matrix`` points x ``names`` fitting regret (MISSING_COST where absent),
    ``base`` points x (M, N, K), ``wins`` how many points each variant wins (leaf ties). For synthetic
    grids (service.tables.surrogate), which are labelled as arrays and need no per-point records.
    ``validity`` at ``codebook``: the grown tree goes through keep_valid."""
    if len(matrix) == 0:
        raise ValueError("a tree needs at least one point")
    names_f = (*FEATURES, *extra_features)
    features = feature_columns(base, extra_features)

    def grow(rows: np.ndarray, depth: int) -> TreeNode:
        cost = matrix[rows].sum(axis=0)
        leaf = _leaf(cost, names, wins)
        leaf_cost = float(cost[leaf])
        node = TreeNode(names[leaf], points=len(rows), regret=leaf_cost / len(rows), best=names[leaf])
        if depth >= max_depth or len(rows) < 2 * min_leaf or leaf_cost <= 1e-12:
            return node
        best: tuple[float, int, int] | None = None  # (cost, feature, threshold)
        for f in range(len(names_f)):
            order = rows[np.argsort(features[rows, f], kind="stable")]
            values = features[order, f]
            prefix = np.cumsum(matrix[order], axis=0)
            costs = prefix[:-1].min(axis=1) + (prefix[-1] - prefix[:-1]).min(axis=1)  # split after row i
            index = np.arange(len(order) - 1)
            allowed = (values[:-1] != values[1:]) & (index >= min_leaf - 1) & (index < len(order) - min_leaf)
            if not allowed.any():
                continue
            i = int(np.flatnonzero(allowed)[np.argmin(costs[allowed])])
            if grow_through:  # among near-equal cuts, the one nearest the middle
                near = np.flatnonzero(allowed & (costs <= costs[i] + 1e-9))
                i = int(near[np.argmin(np.abs(near - (len(order) - 1) / 2))])
            if best is None or float(costs[i]) < best[0] - 1e-12:
                best = (float(costs[i]), f, split_threshold(int(values[i]), int(values[i + 1])))
        if best is None or (not grow_through and best[0] >= leaf_cost - 1e-9 - min_gain * len(rows)):
            return node
        _, f, threshold = best
        go_left = features[rows, f] <= threshold
        left, right = grow(rows[go_left], depth + 1), grow(rows[~go_left], depth + 1)
        if left.variant is not None and left.variant == right.variant:
            return node  # both halves want the same variant: the split decides nothing
        if grow_through and _cost(left) + _cost(right) >= leaf_cost - 1e-9 - min_gain * len(rows):
            return node  # the grown subtree does not pay for itself
        return TreeNode(None, names_f[f], threshold, left, right, len(rows), node.regret, node.best)

    root = grow(np.arange(len(matrix)), 0)
    domain = domain_of(validity)
    if domain is None:
        return root
    return keep_valid(root, matrix, names, features, names_f, wins, domain, codebook)


def feature_columns(base: np.ndarray, extra_features: Sequence[str]) -> np.ndarray:
    """rows x (M, N, K, extras): ``base`` (rows x M, N, K) with each extra feature's column."""
    columns = [base[:, i] for i in range(len(FEATURES))]
    distinct_n, n_index = np.unique(base[:, 1], return_inverse=True)
    for name in extra_features:
        kmod = KModFeature.parse(name)
        if kmod is not None:
            columns.append(np.where(base[:, 2] <= kmod.upto, base[:, 2] % kmod.q, kmod.q))
            continue
        # a RoundsFeature reads N only: one evaluation per distinct N
        at = np.array([feature_value(name, 1, int(n), 1) for n in distinct_n.tolist()], dtype=np.int64)
        columns.append(at[n_index])
    return np.stack(columns, axis=1)


def keep_valid(
    root: TreeNode,
    matrix: np.ndarray,
    names: Sequence[str],
    features: np.ndarray,
    names_f: Sequence[str],
    wins: dict[str, int],
    domain: DomainValidity,
    codebook: int,
) -> TreeNode:
    """``root`` with every leaf that answers a variant the package rules out somewhere on the domain
    grid inside it (validity at the cell and its grid neighbours, DomainValidity.safe) grown again.

    Why a repair and not validity rows in every fit: a tree whose leaves are valid stays as it was (its
    cross-validated depth and leaf size, its answers, its cost). An invalid leaf is regrown from its
    own rows plus one validity row per domain cell inside it (a variant costs MISSING_COST where it is
    ruled out, 0 where valid), split while its answer is ruled out somewhere and a cut is left, then
    where validity changes while a cut lowers the rows' regret: the variant its rows prefer is kept
    where it can run, and a part without rows takes the variant valid there that the leaf's rows rank
    best. Where no variant of the table is valid the leaf answers
    NO_ANSWER (the engine's own default runs). ``features`` are the rows' columns (M, N, K, extras).

    A tree that splits on K's divisibility (KModFeature, up to its ``upto``) is checked at every
    whole-block K up to that top instead of the domain grid's K there, each at itself and its N
    neighbours (DomainValidity.quantum_safe): a leaf ``k % 1024 <= 0`` holds no K between two multiples
    of 1024, and the 8-neighbour rule would rule its KB4 out everywhere."""
    ms = [int(m) for m in np.unique(features[:, 0])]
    kmods = [kmod for kmod in map(KModFeature.parse, names_f[len(FEATURES) :]) if kmod is not None]
    top = max((kmod.upto for kmod in kmods), default=0)
    parts_cells, parts_safe = [], []
    for m in ms:
        cells_m = domain.cells(m)
        safe_m = domain.safe(codebook, m, names).reshape(-1, len(names))
        if top:  # every whole-block K up to the top is a cell, checked at itself (quantum_safe)
            above = cells_m[:, 2] > top
            ks, quantum = domain.quantum_safe(codebook, m, names, top)
            cells_m = np.concatenate([domain.cells(m, ks), cells_m[above]])
            safe_m = np.concatenate([quantum.reshape(-1, len(names)), safe_m[above]])
        parts_cells.append(cells_m)
        parts_safe.append(safe_m)
    cells, safe = np.concatenate(parts_cells), np.concatenate(parts_safe)
    cell_features = feature_columns(cells, names_f[len(FEATURES) :])
    col = {v: j for j, v in enumerate(names)}
    split_on = (0, 1, 2) if domain.reads_n else (0, 2)  # validity that ignores N never needs a cut on it

    def leaf(variant: str, rows: np.ndarray) -> TreeNode:
        regret = float(matrix[rows, col[variant]].sum()) / len(rows) if rows.size and variant in col else None
        return TreeNode(variant, points=len(rows), regret=regret, best=variant)

    def walk(node: TreeNode, rows: np.ndarray, at: np.ndarray) -> TreeNode:
        if node.variant is not None:
            if node.variant in col and safe[at, col[node.variant]].all():
                return node
            if not domain.reads_n:  # the cells of one (M, K) agree: one of them stands for all
                at = at[np.unique(cells[at][:, [0, 2]], axis=0, return_index=True)[1]]
            return _regrow(
                matrix[rows], features[rows, : len(FEATURES)], safe[at], cells[at], names, wins, split_on
            )
        assert node.left is not None and node.right is not None
        f = list(names_f).index(node.feature)
        go, go_at = features[rows, f] <= node.threshold, cell_features[at, f] <= node.threshold
        left, right = walk(node.left, rows[go], at[go_at]), walk(node.right, rows[~go], at[~go_at])
        if left.variant is not None and left.variant == right.variant:
            return leaf(left.variant, rows)
        return TreeNode(None, node.feature, node.threshold, left, right, node.points, node.regret, node.best)

    return walk(root, np.arange(len(matrix)), np.arange(len(cells)))


def _regrow(
    data: np.ndarray,
    data_base: np.ndarray,
    safe: np.ndarray,
    cells: np.ndarray,
    names: Sequence[str],
    wins: dict[str, int],
    split_on: Sequence[int] = (0, 1, 2),
) -> TreeNode:
    """keep_valid's subtree for one leaf: ``data`` its rows' regret (``data_base`` their M, N, K), ``safe``
    cells x names validity at its domain cells, cut on the FEATURES of ``split_on``. Labels are
    ``names`` and NO_ANSWER, which costs 0 at a cell where no variant is valid and at a row nothing was
    measured at, and MISSING_COST (twice at a row) elsewhere. Ties go to the variant the leaf's rows
    rank best, then to wins, then the name."""
    labels = [*names, NO_ANSWER]
    measured = (data < MISSING_COST).any(axis=1)
    none_at_cells = np.where(safe.any(axis=1), MISSING_COST, 0.0)
    cost = np.vstack(
        [
            np.column_stack([data, np.where(measured, 2 * MISSING_COST, 0.0)]),
            np.column_stack([np.where(safe, 0.0, MISSING_COST), none_at_cells]),
        ]
    )
    base = np.vstack([data_base, cells])
    is_cell = np.arange(len(base)) >= len(data)
    prior = cost[~is_cell].sum(axis=0)
    rank = sorted(range(len(labels)), key=lambda j: (prior[j], -wins.get(labels[j], 0), labels[j]))
    order_of = np.empty(len(labels), dtype=np.int64)
    order_of[rank] = np.arange(len(labels))

    def leaf(j: int, rows: np.ndarray) -> TreeNode:
        data_rows = rows[~is_cell[rows]]
        regret = None
        if data_rows.size and j < len(names):
            regret = float(cost[data_rows, j].sum()) / len(data_rows)
        return TreeNode(labels[j], points=len(data_rows), regret=regret, best=labels[j])

    def flips(rows: np.ndarray, f: int, values: np.ndarray) -> np.ndarray:
        """Per cut between ``values[i] < values[i + 1]`` (rows sorted on feature f): whether validity
        changes across it, between the cells on either side nearest to it."""
        at = rows[is_cell[rows]]
        if not at.size:
            return np.zeros(len(values) - 1, dtype=bool)
        at = at[np.argsort(base[at, f], kind="stable")]
        at_values = base[at, f]
        starts = np.flatnonzero(np.r_[True, at_values[1:] != at_values[:-1]])
        distinct = at_values[starts]
        ok = safe[at - len(data)]
        every, some = np.logical_and.reduceat(ok, starts, axis=0), np.logical_or.reduceat(ok, starts, axis=0)
        changes = (every[:-1] != every[1:]).any(axis=1) | (some[:-1] != some[1:]).any(axis=1)
        changes = np.append(changes, False)
        below = np.searchsorted(distinct, values[:-1], side="right") - 1  # the last cell value <= values[i]
        return (below >= 0) & changes[np.maximum(below, 0)]

    def grow(rows: np.ndarray) -> TreeNode:
        total = cost[rows].sum(axis=0)
        tied = np.flatnonzero(total <= total.min() + 1e-9)
        j = int(tied[np.argmin(order_of[tied])])
        node = leaf(j, rows)
        forced = cost[rows[is_cell[rows]], j].sum() > 0.0  # ruled out at a cell inside: must split
        best: tuple[float, int, int] | None = None  # (cost, feature, threshold)
        for f in split_on:
            order = rows[np.argsort(base[rows, f], kind="stable")]
            values = base[order, f]
            prefix = np.cumsum(cost[order], axis=0)
            costs = prefix[:-1].min(axis=1) + (prefix[-1] - prefix[:-1]).min(axis=1)
            cut = values[:-1] != values[1:]
            if not forced:  # only where validity changes (the rows' own cuts were the first fit's to make)
                cut &= flips(rows, f, values)
            allowed = np.flatnonzero(cut)
            if not allowed.size:
                continue
            near = allowed[costs[allowed] <= costs[allowed].min() + 1e-9]  # of equal cuts, the middle one
            i = int(near[np.argmin(np.abs(near - (len(order) - 1) / 2))])
            if best is None or float(costs[i]) < best[0] - 1e-9:
                best = (float(costs[i]), f, split_threshold(int(values[i]), int(values[i + 1])))
        if best is None or (not forced and best[0] >= float(total[j]) - 1e-9):
            return node  # valid throughout and no cut where validity changes pays; or nothing left to cut
        _, f, threshold = best
        go = base[rows, f] <= threshold
        left, right = grow(rows[go]), grow(rows[~go])
        if left.variant is not None and left.variant == right.variant:
            return leaf(labels.index(left.variant), rows)
        return TreeNode(None, FEATURES[f], threshold, left, right, node.points, node.regret, node.best)

    return grow(np.arange(len(base)))


def _cost(node: TreeNode) -> float:
    """Total fitting regret of a subtree's leaves."""
    if node.variant is not None:
        return (node.regret or 0.0) * node.points
    assert node.left is not None and node.right is not None
    return _cost(node.left) + _cost(node.right)


def truncate(node: TreeNode, depth: int) -> TreeNode:
    """The tree fit_tree grows with ``max_depth=depth``: growth is greedy top-down, so a shallower tree
    is the deeper one cut at ``depth`` (and halves that then agree merged again)."""
    if node.variant is not None:
        return node
    if depth <= 0:
        return TreeNode(node.best, points=node.points, regret=node.regret, best=node.best)
    assert node.left is not None and node.right is not None
    left, right = truncate(node.left, depth - 1), truncate(node.right, depth - 1)
    if left.variant is not None and left.variant == right.variant:
        return TreeNode(node.best, points=node.points, regret=node.regret, best=node.best)
    return TreeNode(None, node.feature, node.threshold, left, right, node.points, node.regret, node.best)
