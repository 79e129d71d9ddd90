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

FEATURES: tuple[str, ...] = ("m", "n", "k")
_ROUNDS_RE = re.compile(r"^rounds_kb(\d+)_tw(\d+)_cu(\d+)_r(\d+)_b(\d+)$")
# A variant missing (not parity-passing) at a point costs this much there: never chosen for a leaf
# holding that point while any variant is complete.
MISSING_COST = 1e6
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
        if self.variant is not None:
            return {self.variant}
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
        return self.root.answer(m_key, n, k)


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
) -> TreeNode:
    """Greedy top-down tree minimising total fitting regret; a split must lower its node's mean regret
    by more than ``min_gain`` (0: any decrease).

    ``grow_through``: a split is made even when it alone lowers nothing (a pocket inside both ranges
    needs two cuts before either pays; near-ties then cut at the middle row), and a subtree that in
    the end does not lower its node's regret by ``min_gain`` is pruned back to a leaf. For dense
    synthetic grids (service.tables.surrogate), where greedy one-cut gains miss such pockets.

    ``extra_features``: integer features beyond M, N, K (RoundsFeature, KModFeature names) a split
    may read."""
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
) -> TreeNode:
    """fit_tree over arrays: ``matrix`` points x ``names`` fitting regret (MISSING_COST where absent),
    ``base`` points x (M, N, K), ``wins`` how many points each variant wins (leaf ties). For synthetic
    grids (service.tables.surrogate), which are labelled as arrays and need no per-point records."""
    if len(matrix) == 0:
        raise ValueError("a tree needs at least one point")
    names_f = (*FEATURES, *extra_features)
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
    features = np.stack(columns, axis=1)

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

    return grow(np.arange(len(matrix)), 0)


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
