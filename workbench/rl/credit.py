"""Step and chunk credit with per-cell errors: measure advantage misattribution (docs/methods.md
"Monte-Carlo credit" and "Credit uncertainty").

Step GRPO gives every step of trajectory i the same advantage A_i. What a step actually contributed is
measured here from the value of the states around it:

    V(x_t^i)  = mean reward of M continuations sampled from x_t^i with the same policy
    V(x_T)    = the group mean reward when all trajectories start from the same noise; else the mean of
                M continuations from each trajectory's own x_T^i;                      V(x_0^i) = r_i
    d_{i,t}   = V(x_{t+1}^i) - V(x_t^i)      (state index t = 0 is noise; step t goes t -> t + 1)

The credits of a trajectory telescope to r_i - V(x_T). Every cell has a standard error from the spread
of the continuation rewards (`workbench.rl.credit_stats`), and is misattributed (against A_i), aligned
(with it) or undetermined by a Student-t test (exact where rewards tie) at the false-call rate that z stands
for (`workbench.rl.significance`). A unit from x_T to the image under a shared start has credit r_i - mean r,
the raw advantage: its class is fixed by construction and flagged (`Credit.chunk_fixed`). Steps that are not trained and
trajectories with A_i = 0 are left out of every rate. Cheaper estimators (`credit_estimators`) fill the
same `Credit`; `refine` spends a budget of continuations where cells are still undetermined.

`Credit` keeps the raw continuation rewards, so `rechunk` recomputes chunk credits, errors, classes and
rates for a new schedule without sampling (milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.chunking import chunk_boundaries, chunk_sum, parse_chunk_spec
from workbench.rl.credit_estimators import ESTIMATORS, continuation_cost, measured_precision, run_continuations
from workbench.rl.credit_stats import (
    Rates,
    classify,
    credit_dof,
    credit_variance,
    exact_p,
    grow_looks,
    rates,
    state_counts,
    state_means,
    unit_looks,
)
from workbench.rl.significance import false_call_rate

Z = 2.0  # default significance: false-call rate P(|N(0, 1)| > 2) = 4.6 % per cell with no credit (Student-t test)


@dataclass
class CreditRates:
    """Rates of steps and chunks at one z (`credit_stats.Rates`)."""

    step: Rates
    chunk: Rates
    z: float


@dataclass
class CreditClasses:
    """Classes of every cell at one z: -1 misattributed, 0 undetermined, +1 aligned (`credit_stats.classify`)."""

    step: torch.Tensor  # (G, T) int8
    chunk: torch.Tensor  # (G, K) int8
    z: float


@dataclass
class Credit:
    """Step and chunk credit of one group. G trajectories, T steps, up to M continuations per state."""

    prompt: str
    rewards: torch.Tensor  # (G,) r_i of the final images
    advantages: torch.Tensor  # (G,) A_i the objective would use (only its sign matters here)
    continuation_rewards: torch.Tensor  # (G, T - 1, M) continuation rewards from states 1..T-1, NaN past a state's M
    sizes: list[int]  # chunk sizes over the T steps
    seed: int = 0  # continuation noise seed
    trained: torch.Tensor | None = None  # (T,) bool: steps that carry a log-prob; None = all
    crn: bool = True  # continuations share noise across states (common random numbers)
    estimator: str = "mc"  # ESTIMATORS name that valued the states
    start: torch.Tensor | None = None  # (G,) V(x_T) of a look-ahead estimator; None = group mean reward
    deterministic: bool = False  # look-ahead estimators have no Monte-Carlo error
    cost: dict = field(default_factory=dict)  # {"nfe": transformer evaluations, "seconds": wall time}
    start_continuations: torch.Tensor | None = None  # (G, M) continuations from each own x_T (no shared start noise)
    looks: torch.Tensor | None = None  # (G, T - 1) refinement rounds that grew each state; None = 0
    precision: str = "float32"  # numerics of the continuations' transformer evaluations (core/precision.py)
    look_rounds: torch.Tensor | None = None  # (G, T - 1) int64: bit r set when refinement round r grew the state
    final_scores: torch.Tensor | None = None  # (G, R) scores of each final image (`rescore`); rewards = their mean
    # classes and halves already computed, by key (a Credit is never changed in place: edits make a new one)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _remember(self, key: tuple, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def num_steps(self) -> int:
        return self.continuation_rewards.shape[1] + 1

    @property
    def counts(self) -> torch.Tensor:
        """(G, T - 1) continuations per intermediate state."""
        return state_counts(self.continuation_rewards)

    @property
    def values(self) -> torch.Tensor:
        """(G, T + 1) state values V(x_t^i): start value, continuation means, final rewards."""
        g = self.rewards.shape[0]
        start = self.rewards.mean().expand(g) if self.start is None else self.start  # (G,)
        if self.start_continuations is not None:
            start = state_means(self.start_continuations[:, None])[:, 0]  # (G,) each trajectory's own x_T
        return torch.cat([start[:, None], state_means(self.continuation_rewards), self.rewards[:, None]], dim=1)

    @property
    def step_credit(self) -> torch.Tensor:
        """(G, T) d_{i,t} = V(x_{t+1}^i) - V(x_t^i)."""
        return self.values.diff(dim=1)

    @property
    def chunk_credit(self) -> torch.Tensor:
        """(G, K) sum of the step credits inside each chunk, = V(chunk end) - V(chunk start)."""
        return chunk_sum(self.step_credit, self.sizes)

    def _start_var(self) -> tuple[torch.Tensor, float]:
        """Variance (G,) of V(x_T) without own continuations, and its degrees of freedom."""
        g = self.rewards.shape[0]
        if self.start is not None:
            return torch.zeros(g), torch.inf  # a look-ahead value: no Monte-Carlo error
        return (self.rewards.var() / g).expand(g), float(g - 1)  # the group mean of G rewards

    def _se(self, edges: list[int]) -> torch.Tensor:
        if self.deterministic:
            return torch.zeros(self.rewards.shape[0], len(edges) - 1)
        start_var, _ = self._start_var()
        return credit_variance(self.continuation_rewards, start_var, edges, self.crn, self.start_continuations,
                               self.final_scores).sqrt()

    def _dof(self, edges: list[int]) -> torch.Tensor:
        """(G, J) degrees of freedom of each unit's error (`credit_stats.credit_dof`)."""
        if self.deterministic:
            return torch.full((self.rewards.shape[0], len(edges) - 1), torch.inf, dtype=torch.float64)
        start_var, start_dof = self._start_var()
        return credit_dof(self.continuation_rewards, start_var, start_dof, edges, self.crn, self.start_continuations,
                          self.final_scores)

    def _exact(self, edges: list[int]) -> torch.Tensor | None:
        """(G, J) exact p-values of the units whose rewards tie, NaN elsewhere (`credit_stats.exact_p`); they do
        not depend on z, so they are kept with the edges."""
        if self.deterministic:
            return None
        return self._remember(("exact", tuple(edges)), lambda: exact_p(
            self.continuation_rewards, self.rewards, edges, self.crn, self.start_continuations, self.final_scores,
            self.start))

    def _looks(self, edges: list[int]) -> torch.Tensor:
        """(G, J) times each unit has been tested (`credit_stats.unit_looks`)."""
        return unit_looks(self.looks, self.look_rounds, edges, self.rewards.shape[0])

    @property
    def _step_edges(self) -> list[int]:
        return list(range(self.num_steps + 1))

    @property
    def _chunk_edges(self) -> list[int]:
        return [0, *chunk_boundaries(self.sizes), self.num_steps]

    @property
    def step_se(self) -> torch.Tensor:
        """(G, T) standard error of every step credit (NaN where a state has < 2 continuations)."""
        return self._se(self._step_edges)

    @property
    def chunk_se(self) -> torch.Tensor:
        """(G, K) standard error of every chunk credit."""
        return self._se(self._chunk_edges)

    @property
    def chunk_fixed(self) -> torch.Tensor:
        """(G, K) bool: chunks whose credit is r_i - mean r by construction (from the shared x_T to the image,
        e.g. the one-chunk GSPO schedule): the raw advantage, so their sign is A_i's and they are never
        misattributed, whatever the policy."""
        edges = self._chunk_edges
        whole = torch.tensor([a == 0 and b == self.num_steps for a, b in zip(edges[:-1], edges[1:])])  # (K,)
        by_mean = self.start is None and self.start_continuations is None
        return whole[None, :].expand(self.rewards.shape[0], -1) & by_mean

    @property
    def step_valid(self) -> torch.Tensor:
        """(G, T) bool: cells that count in rates (trained step, advantage not 0)."""
        trained = torch.ones(self.num_steps, dtype=torch.bool) if self.trained is None else self.trained
        return (self.advantages != 0)[:, None] & trained[None, :]

    @property
    def chunk_valid(self) -> torch.Tensor:
        """(G, K) bool: chunks with at least one trained step, of trajectories with A_i not 0."""
        return chunk_sum(self.step_valid.float(), self.sizes) > 0

    def step_classes(self, z: float = Z) -> torch.Tensor:
        """(G, T) int8: -1 misattributed, 0 undetermined, +1 aligned (`credit_stats.classify`)."""
        edges = self._step_edges
        return self._remember(("step", z), lambda: classify(self.step_credit, self.step_se, self.advantages, z,
                                                            self._dof(edges), self._looks(edges), self._exact(edges)))

    def chunk_classes(self, z: float = Z) -> torch.Tensor:
        """(G, K) int8 classes of the chunk credits."""
        edges = self._chunk_edges
        return self._remember(("chunk", z), lambda: classify(self.chunk_credit, self.chunk_se, self.advantages, z,
                                                             self._dof(edges), self._looks(edges), self._exact(edges)))

    def classify(self, z: float = Z) -> CreditClasses:
        """Step and chunk classes at z (cells that count in no rate keep their class; see step_valid)."""
        return CreditClasses(self.step_classes(z), self.chunk_classes(z), z)

    def rates(self, z: float = Z) -> CreditRates:
        """Misattributed among determined cells, determined share, credit mass against A, plain sign rate."""
        chunk = rates(self.chunk_credit, self.chunk_classes(z), self.advantages, self.chunk_valid, self.chunk_fixed)
        return CreditRates(self.step_rates(z), chunk, z)

    def step_rates(self, z: float = Z) -> Rates:
        """The step rates alone (they do not depend on the chunks)."""
        return rates(self.step_credit, self.step_classes(z), self.advantages, self.step_valid)

    def rechunk(self, spec) -> Credit:
        """The same measurement under another chunk schedule ("2,3,4,7" or a list of sizes). The step classes
        and the halves, which do not depend on the chunks, come along already computed."""
        sizes = parse_chunk_spec(spec, self.num_steps)
        out = replace(self, sizes=sizes)
        out._memo.update({k: v for k, v in self._memo.items() if k[0] in ("step", "exact")})
        if ("halves",) in self._memo:
            split = self._memo[("halves",)]
            out._memo[("halves",)] = None if split is None else tuple(half.rechunk(sizes) for half in split)
        return out

    def halves(self) -> tuple[Credit, Credit] | None:
        """Two measurements of the same group from disjoint halves of the continuations (M / 2 each): their
        continuation noise is independent (noise is seeded by the index k), so how far their rates differ
        shows how much a rate moves with the continuation seed at M / 2. None when M differs between states
        (after refinement), M < 4, or the estimator has no Monte-Carlo noise."""
        return self._remember(("halves",), self._split)

    def _split(self) -> tuple[Credit, Credit] | None:
        k = self.counts
        if self.deterministic or int(k.min()) != int(k.max()) or int(k.min()) < 4:
            return None
        h = int(k.min()) // 2
        own = self.start_continuations
        starts = (None, None) if own is None else (own[:, :h], own[:, h:2 * h])
        rewards, fresh = self.continuation_rewards, dict(looks=None, look_rounds=None)
        return (replace(self, continuation_rewards=rewards[..., :h], start_continuations=starts[0], **fresh),
                replace(self, continuation_rewards=rewards[..., h:2 * h], start_continuations=starts[1], **fresh))

    def misattribution(self, z: float = Z) -> dict[str, float]:
        """The plain sign rates (earlier figures) with their errors, beside the significance-aware rates."""
        r = self.rates(z)
        out = {"step_misattribution": r.step.plain, "step_misattribution_se": r.step.plain_se,
               "chunk_misattribution": r.chunk.plain, "chunk_misattribution_se": r.chunk.plain_se}
        for name, unit in (("step", r.step), ("chunk", r.chunk)):
            out.update({f"{name}_{key}": getattr(unit, key) for key in
                        ("misattributed", "misattributed_se", "determined", "determined_se", "mass_against",
                         "mass_against_se")})
        return out

    def misattributed_steps(self) -> torch.Tensor:
        """(G, T) bool: valid cells whose credit sign is opposite to the advantage sign (plain, no errors)."""
        return (self.step_credit * self.advantages[:, None] < 0) & self.step_valid

    def summary(self, z: float = Z) -> dict:
        """JSON-ready numbers: credits (G x T, G x K), their errors and classes, rates and errors."""
        k = self.counts
        return {"prompt": self.prompt, "chunks": self.sizes, "estimator": self.estimator, "crn": self.crn, "z": z,
                "precision": self.precision,
                "false_call_rate": false_call_rate(z),
                "chunk_fixed_by_construction": self.rates(z).chunk.by_construction,
                "continuations_min": int(k.min()), "continuations_max": int(k.max()), "cost": self.cost,
                "rewards": self.rewards.tolist(), "advantage": self.advantages.tolist(), "values": self.values.tolist(),
                "credit": self.step_credit.tolist(), "credit_se": _finite(self.step_se),
                "step_classes": self.step_classes(z).tolist(), "chunk_credit": self.chunk_credit.tolist(),
                "chunk_se": _finite(self.chunk_se), "chunk_classes": self.chunk_classes(z).tolist(),
                **self.misattribution(z)}


def _finite(t: torch.Tensor) -> list:
    """NaN -> None, for JSON."""
    return [[None if v != v else v for v in row] for row in t.tolist()]


def measure_credit(policy: FlowPolicy, group: TrajectoryGroup, reward_fn, continuations: int = 4,
                   chunks="2,3,4,7", advantage: str = "grpo", seed: int = 0, progress=None,
                   estimator: str = "mc", crn: bool = True, precision: str = "auto", rescore: int = 0) -> Credit:
    """Credit of a sampled group under `reward_fn` (a RewardFunction or any rewards callable).

    estimator: an ESTIMATORS name: mc (M = `continuations` per state), ode or x0 (one look-ahead per state).
    crn: common random numbers across the continuations of a trajectory (False: independent noise).
    precision: numerics of the continuations (core/precision.py): "auto" is bfloat16 where the device
    computes it natively (about twice as fast on such a CPU), else float32.
    rescore: for a stochastic reward (another number each time it scores the same image), score every final
    image R more times; its value is then the mean of the 1 + R scores, with their error, so the last step's
    credit no longer holds the reward's noise as if it were the step's (docs/methods.md "The last step").
    The shipped rewards are functions of the image: for them re-scoring only repeats the same number.
    """
    from workbench.rl.advantages import ADVANTAGES

    fn = ESTIMATORS.get(estimator)
    if continuations < 1:
        raise WorkbenchError(f"continuations (M) must be a positive integer, got {continuations}")
    if not isinstance(rescore, int) or isinstance(rescore, bool) or rescore < 0:
        raise WorkbenchError(f"rescore must be a whole number of extra scores >= 0, got {rescore!r}")
    if group.num_steps < 2:
        raise WorkbenchError("credit needs at least 2 steps: there is no intermediate state to continue from")
    sizes = parse_chunk_spec(chunks, group.num_steps)
    precision = measured_precision(policy, estimator, precision)
    prompts = [group.prompt] * group.group_size
    scores = torch.stack([torch.as_tensor(reward_fn(group.images, prompts), dtype=torch.float32).cpu()
                          for _ in range(1 + rescore)], dim=1)  # (G, 1 + R)
    rewards = scores.mean(1)  # (G,) the value of each final image
    advantages = ADVANTAGES.get(advantage)(rewards[None]).values[0]  # (G,)
    est = fn(policy, group, reward_fn, continuations, seed, crn, progress, precision)
    return Credit(group.prompt, rewards, advantages, est.continuation_rewards, sizes, seed, group.config.sde_mask(),
                  crn, estimator, est.start, est.deterministic, {"nfe": est.nfe, "seconds": est.seconds},
                  est.start_continuations, precision=precision, final_scores=scores if rescore else None)


REACH = 1.0  # undetermined cells with |d| >= REACH se are refined first: more continuations can determine them


def _open_cells(credit: torch.Tensor, se: torch.Tensor, classes: torch.Tensor, valid: torch.Tensor) -> tuple:
    """(undetermined valid cells, those within reach |d| >= REACH se), both (G, J) float."""
    open_ = (classes == 0) & valid
    return open_.float(), (open_ & (credit.abs() >= REACH * se.nan_to_num(torch.inf))).float()


def _undetermined_near_states(credit: Credit, z: float) -> torch.Tensor:
    """(G, T - 1) undetermined valid cells (steps and chunks) that start or end at each state continuations
    start from (not the shared start x_T, not the final image), counting only those within reach of z errors
    when any of them touches such a state."""
    t = credit.num_steps
    steps = _open_cells(credit.step_credit, credit.step_se, credit.step_classes(z), credit.step_valid)
    chunks = _open_cells(credit.chunk_credit, credit.chunk_se, credit.chunk_classes(z), credit.chunk_valid)
    edges = torch.tensor([0, *chunk_boundaries(credit.sizes), t])
    near = []
    for use in (1, 0):  # within reach first, else every undetermined cell
        n = torch.zeros(credit.rewards.shape[0], t + 1)
        n[:, :-1] += steps[use]
        n[:, 1:] += steps[use]
        n.index_add_(1, edges[:-1], chunks[use])
        n.index_add_(1, edges[1:], chunks[use])
        near.append(n[:, 1:-1])  # (G, T - 1): continuations start from states 1..T - 1; x_T and the image have none
    return near[0] if bool(near[0].any()) else near[1]


def _allocate(priority: torch.Tensor, counts: torch.Tensor, remaining: int) -> torch.Tensor:
    """Rows (R, 3) = (i, s, k) for one round, at most `remaining` of them.

    priority (G, S): undetermined cells next to each state. Trajectories with the most such cells go first;
    in each, every state from the first to the last one next to an undetermined cell is brought to twice
    the largest M of that span, so neighbouring states keep equal M and, under CRN, pair all their
    continuations (a cell between states with M = 16 and M = 4 would pair only 4). Within a span the
    states with the most undetermined neighbours are served first when the budget runs out."""
    rows = []
    for i in priority.sum(1).argsort(descending=True, stable=True).tolist():
        near = priority[i].nonzero()[:, 0]  # (N,) state columns next to undetermined cells
        if len(near) == 0:
            break
        span = torch.arange(int(near.min()), int(near.max()) + 1)
        target = 2 * max(int(counts[i, span].max()), 1)
        for j in span[priority[i, span].argsort(descending=True, stable=True)].tolist():
            n = int(counts[i, j])
            add = min(target - n, remaining)
            rows += [(i, j + 1, k) for k in range(n, n + add)]
            remaining -= add
            if remaining == 0:
                return torch.tensor(rows, dtype=torch.long).view(-1, 3)
    return torch.tensor(rows, dtype=torch.long).view(-1, 3)


def _with_rows(credit: Credit, rows: torch.Tensor, rewards: torch.Tensor) -> Credit:
    """The credit with new continuation rewards (R,) at rows (R, 3) = (i, s, k) added; M only grows."""
    g, s, k = credit.continuation_rewards.shape
    grown = torch.full((g, s, max(k, int(rows[:, 2].max()) + 1)), torch.nan)
    grown[..., :k] = credit.continuation_rewards
    grown[rows[:, 0], rows[:, 1] - 1, rows[:, 2]] = rewards
    cost = {**credit.cost, "nfe": credit.cost.get("nfe", 0) + continuation_cost(rows, credit.num_steps, credit.trained)}
    looks, rounds = grow_looks(credit.looks, credit.look_rounds, rows[:, 0], rows[:, 1] - 1, (g, s))  # (G, T - 1)
    return replace(credit, continuation_rewards=grown, cost=cost, looks=looks, look_rounds=rounds)


def refine_rounds(credit: Credit, policy: FlowPolicy, group: TrajectoryGroup, reward_fn, budget: int,
                  z: float = Z, progress=None) -> Iterator[Credit]:
    """Spend up to `budget` more continuations where cells are undetermined; yields the credit after each round.

    Each round doubles M over the span of states next to undetermined cells of each trajectory (most such
    cells first; `_allocate`); rounds stop when every cell is determined or the budget is spent. M never
    decreases anywhere; noise follows the credit's seed and CRN setting, so new continuations pair with the
    old ones.
    """
    if credit.deterministic:
        raise WorkbenchError(f"the {credit.estimator} estimator has no Monte-Carlo error to refine; measure with mc")
    if budget < 1:
        raise WorkbenchError(f"budget must be a positive number of continuations, got {budget}")
    if group.group_size != credit.rewards.shape[0] or group.num_steps != credit.num_steps:
        raise WorkbenchError("refine needs the group the credit was measured on (G and T differ)")

    def draw(rows: torch.Tensor, spent: int) -> torch.Tensor:
        def within(done: int, total: int, before: int = spent, n: int = len(rows)) -> None:
            if progress is not None:
                progress(before + n * done // max(total, 1), budget)
        return run_continuations(policy, group, reward_fn, rows, credit.seed, credit.crn, progress=within,
                                 precision=credit.precision)  # the new continuations pair with the old ones
    yield from refine_with(credit, draw, budget, z)


def refine_with(credit: Credit, draw, budget: int, z: float = Z) -> Iterator[Credit]:
    """The rounds of `refine_rounds` with continuations from `draw(rows (R, 3), spent) -> rewards (R,)`."""
    spent = 0
    while spent < budget:
        priority = _undetermined_near_states(credit, z)  # (G, T - 1): states continuations start from
        if not bool(priority.any()):
            return
        rows = _allocate(priority, credit.counts, budget - spent)
        credit = _with_rows(credit, rows, draw(rows, spent))
        spent += len(rows)
        yield credit


def refine(credit: Credit, policy: FlowPolicy, group: TrajectoryGroup, reward_fn, budget: int, z: float = Z,
           progress=None) -> Credit:
    """The credit after `refine_rounds` has spent the budget (or determined every cell)."""
    latest = credit
    for latest in refine_rounds(credit, policy, group, reward_fn, budget, z, progress):  # noqa: B007
        pass
    return latest
