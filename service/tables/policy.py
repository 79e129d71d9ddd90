"""Which generalising policy each codebook's fallback takes: work-size segments, a decision tree,
the surrogate (a tree learnt from a per-variant time model's labels on a synthetic grid,
service.tables.surrogate), or the neighbours (a tree learnt from every variant's regret interpolated
between the measured shapes, valid-only answers; service.tables.neighbours).

All are fitted on every measured variant time (service.tables.fallback, service.tables.tree). For
each codebook the choice is made on held-out regret, never on fit: the codebook's shapes are held
out fold by fold (leave-one-shape-out up to LOSO_MAX_SHAPES shapes, else CV_FOLDS folds), each
policy is fitted on the rest (its own hyperparameters chosen by an inner grouped CV, so nothing is
tuned on the held-out shape), and answers the held-out points. A held-out point a policy cannot
answer (segments: no training shape in its aspect class) is charged UNMEASURED_PENALTY, like a
variant that was never measured there. The surrogate's model is pooled over codebooks: its fold
model is fitted on every codebook's points outside the fold's shapes, and it is scored by the
model's own argmin at the held-out points (fitting its grid tree per fold would cost seconds each;
the tree only compresses that argmin, and bench/table_regret.py measures the emitted tree's
held-out regret beside it). The neighbours are scored the same way (the model's argmin, its
bandwidth chosen again inside each fold). The lowest mean wins; a tie keeps the segments (the
Llaminar dialects' native shape), then the tree. The generated header records each codebook's
choice and the figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from service.tables.blas import single_blas_thread
from service.tables.fallback import (
    UNMEASURED_PENALTY,
    FallbackFit,
    GroupKey,
    RuleMap,
    _held_out_regret,
    aspect_class,
    fit_fallback_cv,
    pick_rule,
    shape_folds,
)
from service.tables.model import FallbackRule, MeasuredPoint
from service.tables.neighbours import NeighbourModel, fit_neighbours, neighbours_answer, neighbours_tree
from service.tables.surrogate import (
    Geometry,
    TimeModel,
    candidate_variants,
    fit_models,
    fit_surrogate_trees,
    model_answer,
)
from service.tables.tree import DEPTHS, MIN_LEAF, FallbackTree, fit_tree, truncate
from service.tables.validity import Validity, always_valid, domain_violations

POLICIES: tuple[str, ...] = ("segments", "tree", "surrogate", "neighbours")
Answer = Callable[[MeasuredPoint], str | None]


@dataclass(frozen=True)
class PolicyChoice:
    """One codebook's fallback policy and the held-out mean regret of both candidates."""

    codebook: int
    policy: str  # segments | tree | surrogate | neighbours
    segments_cv: float | None
    tree_cv: float | None
    folds: int
    shapes: int
    surrogate_cv: float | None = None
    neighbours_cv: float | None = None
    detail: str = ""  # the chosen policy's own choices (neighbours: estimator and bandwidth)

    @property
    def chosen_cv(self) -> float | None:
        return {
            "segments": self.segments_cv,
            "tree": self.tree_cv,
            "surrogate": self.surrogate_cv,
            "neighbours": self.neighbours_cv,
        }[self.policy]

    def describe(self) -> str:
        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{v * 100:.2f}%"

        if self.folds < 2:
            return f"{self.policy} (one shape: nothing to hold out)"
        surrogate = "" if self.surrogate_cv is None else f", surrogate {pct(self.surrogate_cv)}"
        neighbours = "" if self.neighbours_cv is None else f", neighbours {pct(self.neighbours_cv)}"
        detail = f"; {self.detail}" if self.detail else ""
        return (
            f"{self.policy} (held-out mean regret over {self.shapes} shapes, {self.folds} folds: "
            f"tree {pct(self.tree_cv)}, segments {pct(self.segments_cv)}{surrogate}{neighbours}{detail})"
        )


@dataclass(frozen=True)
class Fallback:
    """The fitted fallback: segment rules for some codebooks, trees for others, and why."""

    rules: RuleMap
    trees: Mapping[int, FallbackTree] = field(default_factory=dict)
    choices: Mapping[int, PolicyChoice] = field(default_factory=dict)
    segments_cv: Mapping[GroupKey, float | None] = field(default_factory=dict)

    @property
    def mean_cv_regret(self) -> float | None:
        """Mean held-out regret of the chosen policies, weighted by their shapes (header figure)."""
        known = [(c.chosen_cv, c.shapes) for c in self.choices.values() if c.chosen_cv is not None]
        if not known:
            return None
        return sum(v * n for v, n in known if v is not None) / sum(n for _, n in known)

    def answer(self, codebook: int, m_key: int, n: int, k: int) -> str | None:
        tree = self.trees.get(codebook)
        if tree is not None:
            return tree.answer(m_key, n, k)
        if n <= 0 or k <= 0:
            return None
        rules = self.rules.get((codebook, m_key, aspect_class(n, k)))
        return pick_rule(rules, n * k).variant if rules else None

    @property
    def n_rules(self) -> int:
        return sum(len(r) for r in self.rules.values()) + sum(t.root.leaves() for t in self.trees.values())


def as_fallback(value: Fallback | Mapping[GroupKey, Sequence[FallbackRule]]) -> Fallback:
    """A bare segment RuleMap (older callers, tests) as a segments-only Fallback."""
    return value if isinstance(value, Fallback) else Fallback({key: tuple(r) for key, r in value.items()})


def fit_tree_cv(points: Sequence[MeasuredPoint], validity: Validity = always_valid) -> FallbackTree:
    """One codebook's tree, depth and leaf size by grouped CV (shallower, then larger leaves, on a tie).

    Each fold grows one tree per leaf size at the deepest depth; shallower ones are its truncations.
    ``validity``: the tree fitted with the chosen depth and leaf size answers no variant the package
    rules out on the domain grid (service.tables.tree.keep_valid; the folds' trees only choose those)."""
    codebook = points[0].codebook
    ms = tuple(sorted({p.m for p in points}))
    folds = shape_folds(points)
    held: dict[tuple[int, int], list[float]] = {(d, leaf): [] for d in DEPTHS for leaf in MIN_LEAF}
    if len(folds) >= 2:
        for fold in folds:
            out = set(fold)
            train = [p for i, p in enumerate(points) if i not in out]
            for min_leaf in MIN_LEAF:
                deep = fit_tree(train, max(DEPTHS), min_leaf)
                for depth in DEPTHS:
                    tree = truncate(deep, depth)
                    held[(depth, min_leaf)] += [
                        _held_out_regret(points[i], tree.answer(points[i].m, points[i].n, points[i].k))
                        for i in fold
                    ]
    scores = {key: round(sum(v) / len(v), 12) if v else 0.0 for key, v in held.items()}
    depth, min_leaf = min(scores, key=lambda key: (scores[key], key[0], -key[1]))
    tree = fit_tree(points, depth, min_leaf, validity=validity)
    return FallbackTree(codebook, ms, tree, depth, min_leaf)


def _segments_answer(rules: RuleMap) -> Answer:
    def answer(p: MeasuredPoint) -> str | None:
        group = rules.get((p.codebook, p.m, aspect_class(p.n, p.k)))
        return pick_rule(group, p.work_items).variant if group else None

    return answer


def _tree_answer(tree: FallbackTree) -> Answer:
    def answer(p: MeasuredPoint) -> str | None:
        return tree.answer(p.m, p.n, p.k)

    return answer


FITTERS: dict[str, Callable[[Sequence[MeasuredPoint], Validity], Answer]] = {
    "segments": lambda pts, valid: _segments_answer(fit_fallback_cv(pts, validity=valid).rules),
    "tree": lambda pts, valid: _tree_answer(fit_tree_cv(pts, valid)),
}


def fold_regrets(
    points: Sequence[MeasuredPoint], fit: Callable[[list[MeasuredPoint]], Answer]
) -> list[float] | None:
    """Per point, the regret of what ``fit`` answers when fitted without the point's shape fold (None: < 2
    folds); an unanswered point costs UNMEASURED_PENALTY."""
    folds = shape_folds(points)
    if len(folds) < 2:
        return None
    regrets = [0.0] * len(points)
    for fold in folds:
        out = set(fold)
        answer = fit([p for i, p in enumerate(points) if i not in out])
        for i in fold:
            variant = answer(points[i])
            regrets[i] = UNMEASURED_PENALTY if variant is None else _held_out_regret(points[i], variant)
    return regrets


def held_out_regrets(
    points: Sequence[MeasuredPoint], policy: str, validity: Validity = always_valid
) -> list[float] | None:
    """Per point, the regret of ``policy`` fitted without the point's shape fold (None: < 2 folds)."""
    return fold_regrets(points, lambda train: FITTERS[policy](train, validity))


def by_codebook(points: Iterable[MeasuredPoint]) -> dict[int, list[MeasuredPoint]]:
    groups: dict[int, list[MeasuredPoint]] = {}
    for p in points:
        groups.setdefault(p.codebook, []).append(p)
    return {cb: sorted(g, key=lambda p: p.point) for cb, g in sorted(groups.items())}


def surrogate_held_out(
    points: Sequence[MeasuredPoint],
    group: Sequence[MeasuredPoint],
    geometry: Geometry | None,
    validity: Validity = always_valid,
) -> list[float] | None:
    """Per point of one codebook's ``group``, the surrogate model's regret fitted without the point's
    shape fold (the model sees every codebook's points outside the fold's shapes; None: < 2 folds)."""
    folds = shape_folds(group)
    if len(folds) < 2:
        return None
    regrets = [0.0] * len(group)
    for fold in folds:
        shapes = {(group[i].n, group[i].k) for i in fold}
        train = [p for p in points if (p.n, p.k) not in shapes and p.times_us]
        if not train:
            return None
        answer = model_answer(fit_models(train, geometry), candidate_variants(train, validity), validity)
        for i in fold:
            variant = answer(group[i])
            regrets[i] = UNMEASURED_PENALTY if variant is None else _held_out_regret(group[i], variant)
    return regrets


def neighbours_held_out(group: Sequence[MeasuredPoint], valid: Validity) -> list[float] | None:
    """Per point of one codebook's ``group``, the neighbours model's regret fitted without the point's
    shape fold (its bandwidth chosen again inside each fold; None: < 2 folds)."""
    return fold_regrets(group, lambda train: neighbours_answer(fit_neighbours(train, valid)))


class Fits:
    """Every component fit over one training set, each made once on first use: a caller answering
    several policies from the same points (bench/table_regret.py's leave-one-shape-out: segments,
    tree, surrogate and the chosen mix per held-out shape) shares them instead of refitting. The
    held-out scores are memoised too. Pure functions of ``points`` and ``geometry``; nothing else
    enters, so sharing changes no answer."""

    def __init__(
        self,
        points: Sequence[MeasuredPoint],
        geometry: Geometry | None = None,
        validity: Validity = always_valid,
    ) -> None:
        self.points = tuple(points)
        self.geometry = geometry
        self.validity = validity
        self._neighbours: dict[int, NeighbourModel] | None = None
        self._neighbour_trees: dict[int, FallbackTree] = {}
        self._segments: FallbackFit | None = None
        self._trees: dict[int, FallbackTree] = {}
        self._surrogate: dict[int, FallbackTree] | None = None
        self._models: dict[int, TimeModel] | None = None
        self._scores: dict[tuple[int, str], float | None] = {}
        self._groups: dict[int, list[MeasuredPoint]] | None = None

    @property
    def groups(self) -> dict[int, list[MeasuredPoint]]:
        if self._groups is None:
            self._groups = by_codebook(self.points)
        return self._groups

    @property
    def segments(self) -> FallbackFit:
        if self._segments is None:
            self._segments = fit_fallback_cv(self.points, validity=self.validity)
        return self._segments

    def tree(self, codebook: int) -> FallbackTree:
        if codebook not in self._trees:
            self._trees[codebook] = fit_tree_cv(self.groups[codebook], self.validity)
        return self._trees[codebook]

    @property
    def surrogate_trees(self) -> dict[int, FallbackTree]:
        if self._surrogate is None:
            self._surrogate = fit_surrogate_trees(self.points, self.geometry, self.validity)
        return self._surrogate

    @property
    def models(self) -> dict[int, TimeModel]:
        if self._models is None:
            self._models = fit_models(self.points, self.geometry)
        return self._models

    @property
    def neighbours(self) -> dict[int, NeighbourModel]:
        if self._neighbours is None:
            self._neighbours = fit_neighbours([p for p in self.points if p.times_us], self.validity)
        return self._neighbours

    def neighbour_tree(self, codebook: int) -> FallbackTree:
        if codebook not in self._neighbour_trees:
            self._neighbour_trees[codebook] = neighbours_tree(self.neighbours[codebook])
        return self._neighbour_trees[codebook]

    def score(self, codebook: int, policy: str) -> float | None:
        """Held-out mean regret of ``policy`` on the codebook's points (None: < 2 shape folds)."""
        if (codebook, policy) not in self._scores:
            group = self.groups[codebook]
            if policy == "surrogate":
                held = surrogate_held_out(self.points, group, self.geometry, self.validity)
            elif policy == "neighbours":
                held = neighbours_held_out(group, self.validity)
            else:
                held = held_out_regrets(group, policy, self.validity)
            self._scores[(codebook, policy)] = None if held is None else sum(held) / len(held)
        return self._scores[(codebook, policy)]


def segments_ruled_out(fit: FallbackFit, codebook: int, ms: Sequence[int], validity: Validity) -> str:
    """Why the codebook's segments cannot be its fallback ('' when they can): they answer a variant the
    package rules out somewhere on the domain grid. A segment can only answer one variant over its
    whole work range; where no variant of the table is valid at all (e.g. a K slice past every
    kernel's shared memory), only a tree can answer nothing (service.tables.tree.NO_ANSWER)."""

    def answer(cb: int, m: int, n: int, k: int) -> str | None:
        group = fit.rules.get((cb, m, aspect_class(n, k)))
        return pick_rule(group, n * k).variant if group else None

    bad = domain_violations(answer, validity, [(codebook, m) for m in ms], limit=1)
    if not bad:
        return ""
    (_, m, n, k), variant = bad[0]
    return f"segments ruled out: they answer {variant} at M={m} {n}x{k}, which the package rules out"


def fit_policy(
    points: Sequence[MeasuredPoint],
    policies: Sequence[str] = POLICIES,
    geometry: Geometry | None = None,
    fits: Fits | None = None,
    validity: Validity | None = None,
) -> Fallback:
    """Fit the fallback; each codebook takes the policy (of ``policies``) with the lowest held-out regret.

    ``geometry``: launch-geometry covariates for the surrogate's time model (None: times alone). The
    surrogate needs per-variant times at every point; without them it is not a candidate.
    ``fits``: component fits of these same points to reuse (Fits; made here when None).
    ``validity``: the package's restrictions at a point (service.tables.neighbours), which the
    neighbours policy never answers against (None: the fits' own, or always valid)."""
    unknown = set(policies) - set(POLICIES)
    if unknown or not policies:
        raise ValueError(f"policies must be a non-empty subset of {POLICIES}, got {list(policies)}")
    with single_blas_thread():
        return _fit_policy(points, policies, geometry, fits, validity)


def _fit_policy(
    points: Sequence[MeasuredPoint],
    policies: Sequence[str],
    geometry: Geometry | None,
    fits: Fits | None,
    validity: Validity | None,
) -> Fallback:
    if fits is None:
        fits = Fits(points, geometry, validity or always_valid)
    elif fits.points != tuple(points) or fits.geometry is not geometry:
        raise ValueError("fits were made from other points or another geometry")
    elif validity is not None and fits.validity is not validity:
        raise ValueError("fits were made with another validity")
    timed = all(p.times_us for p in points)
    if not timed:  # the surrogate and the neighbours need every variant's time at every point
        policies = tuple(p for p in policies if p not in ("surrogate", "neighbours")) or ("segments",)
    segments = fits.segments
    rules: RuleMap = {}
    trees: dict[int, FallbackTree] = {}
    choices: dict[int, PolicyChoice] = {}
    for cb, group in fits.groups.items():
        scores: dict[str, float | None] = dict.fromkeys(POLICIES)
        if len(policies) > 1:
            for policy in policies:
                scores[policy] = fits.score(cb, policy)
        ruled_out = ""
        if "segments" in policies:
            ruled_out = segments_ruled_out(segments, cb, sorted({p.m for p in group}), fits.validity)
        usable = tuple(p for p in policies if p != "segments" or not ruled_out) or tuple(policies)
        chosen = usable[0]
        if len(usable) > 1:
            known = [(v, POLICIES.index(p), p) for p, v in scores.items() if p in usable and v is not None]
            chosen = min(known)[2] if known else ("segments" if "segments" in usable else usable[0])
            if "segments" in usable and scores["segments"] is not None and known:
                best = min(known)[0]
                if scores["segments"] <= best + 1e-12:
                    chosen = "segments"
        folds = len(shape_folds(group))
        detail = ruled_out if ruled_out and chosen != "segments" else ""
        if chosen == "neighbours" and cb in fits.neighbours:
            model = fits.neighbours[cb]
            hn, hk = model.bandwidth
            own = f"neighbours {model.method} estimator, bandwidth {hn:g} / {hk:g} octaves of N / K"
            detail = f"{own}; {detail}" if detail else own
        choices[cb] = PolicyChoice(
            cb, chosen, scores["segments"], scores["tree"], folds, len({(p.n, p.k) for p in group}),
            scores["surrogate"], scores["neighbours"], detail,
        )  # fmt: skip
        if chosen == "tree":
            trees[cb] = fits.tree(cb)
        elif chosen == "surrogate":
            trees[cb] = fits.surrogate_trees[cb]
        elif chosen == "neighbours":
            trees[cb] = fits.neighbour_tree(cb)
        else:
            rules.update({key: r for key, r in segments.rules.items() if key[0] == cb})
    return Fallback(rules, trees, choices, segments.cv_regret)
