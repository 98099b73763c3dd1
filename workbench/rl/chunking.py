"""Chunk schedules over the T trained denoising steps (GCPO, arXiv 2510.21583; docs/methods.md "Chunk schedules").

A schedule is a list of K positive chunk sizes summing to T, e.g. the paper's [2, 3, 4, 7] for 16
trained transitions. The chunk log-ratio is the mean of the step log-ratios inside the chunk
(`chunk_mean`), so the chunk ratio exp(chunk_mean(l)) is their geometric mean.

Chunkers are registered in `CHUNKERS` with one signature,
`fn(num_steps, l1_rel=None, **options) -> list[int]`, where l1_rel (T,) is GCPO's relative L1 change
||x_t - x_{t-1}||_1 / ||x_t||_1 per step, averaged over trajectories, and a `ChunkerInfo` record that the
app, the CLI and chunk specs read (rl/chunker_info.py). A chunk spec is sizes or a chunker with its options:

    CHUNKERS.get("temporal")(16)  # [2, 3, 4, 7]
    CHUNKERS.get("uniform")(10, size=4)  # [4, 4, 2]
    schedule("uniform:size=4", 10)  # [4, 4, 2]; schedule("2,3,4,7", 16) is [2, 3, 4, 7]

The Chunks tab edits a schedule by hand with `split_at`, `merge_at` and `toggle_boundary` (section 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

import torch

from workbench.core.errors import WorkbenchError, shorten
from workbench.core.registry import Registry
from workbench.rl.chunker_info import ChunkerInfo, ChunkOption

CHUNKERS = Registry("chunker")

TEMPORAL_SIZES = (2, 3, 4, 7)  # GCPO's fixed chunking of 16 trained steps (17-step FLUX schedule, shift 3)


# 1. Schedules: parsing, validation, indices

def _check_num_steps(num_steps: int) -> None:
    if not isinstance(num_steps, Integral) or isinstance(num_steps, bool) or num_steps < 1:
        raise WorkbenchError(f"the number of trained steps must be a positive integer, got {num_steps!r}")


def check_sizes(sizes: Sequence[int]) -> list[int]:
    """Validate a schedule: a non-empty list of positive integers. Returns it as a list of int."""
    if len(sizes) == 0:
        raise WorkbenchError("chunk sizes are empty; give at least one chunk, e.g. [16] for one chunk of 16 steps")
    for s in sizes:
        if not isinstance(s, Integral) or isinstance(s, bool):
            raise WorkbenchError(f"chunk sizes must be integers, got {s!r} in {list(sizes)}")
        if s < 1:
            raise WorkbenchError(f"chunk sizes must be >= 1, got {s} in {list(sizes)}; remove or enlarge that chunk")
    return [int(s) for s in sizes]


def _parse_ints(spec: str | Sequence[int]) -> list[int]:
    """'2, 3,4' or '[2,3,4]' or [2, 3, 4] -> [2, 3, 4]."""
    if not isinstance(spec, (str, Sequence)):
        raise WorkbenchError(f"chunk spec must be a string like '2,3,4,7' or a list of integers, got {spec!r}")
    if not isinstance(spec, str):
        values = list(spec)
        bad = [v for v in values if not isinstance(v, Integral) or isinstance(v, bool)]
        if bad:
            raise WorkbenchError(f"chunk spec {values} must contain only integers, found {bad[0]!r}")
        return [int(v) for v in values]
    text = spec.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if not text:
        return []
    values = []
    for item in text.split(","):
        try:
            values.append(int(item.strip()))
        except ValueError:
            raise WorkbenchError(f"chunk spec {shorten(spec)} is not a comma-separated list of integers "
                                 f"({shorten(item.strip())} is not an integer); write it like '2,3,4,7'") from None
    return values


def parse_chunk_spec(spec: str | Sequence[int], num_steps: int, as_boundaries: bool = False) -> list[int]:
    """Chunk sizes from a spec: sizes "2,3,4,7", or with as_boundaries cut points "2,5,9" -> [2,3,4,T-9].

    Cut points are the start indices of every chunk after the first, strictly increasing in 1..T-1.
    """
    _check_num_steps(num_steps)
    kind = "boundaries" if as_boundaries else "sizes"
    items = (spec.count(",") + 1) if isinstance(spec, str) else len(spec) if isinstance(spec, Sequence) else 0
    most = num_steps - 1 if as_boundaries else num_steps
    if items > max(most, 1):  # counted before any number is read: a spec of a million items costs no work
        raise WorkbenchError(f"chunk {kind} spec {shorten(spec)} has {items} items; {num_steps} steps take at most "
                             f"{most}")
    values = _parse_ints(spec)
    if not values:
        raise WorkbenchError(f"chunk {kind} spec is empty; give e.g. sizes '2,3,4,7' "
                             f"(or sizes '{num_steps}' for one chunk of all {num_steps} steps)")
    if as_boundaries:
        if any(b < 1 or b > num_steps - 1 for b in values):
            raise WorkbenchError(f"chunk boundaries {values} must lie in 1..{num_steps - 1} "
                                 f"(cut points inside {num_steps} steps)")
        if any(b <= a for a, b in zip(values, values[1:])):
            raise WorkbenchError(f"chunk boundaries {values} must be strictly increasing; sort them and drop repeats")
        cuts = [0, *values, num_steps]
        return [b - a for a, b in zip(cuts, cuts[1:])]
    sizes = check_sizes(values)
    if sum(sizes) != num_steps:
        raise WorkbenchError(f"chunk sizes {sizes} sum to {sum(sizes)} but there are {num_steps} trained steps; "
                             f"change the sizes so they sum to {num_steps}")
    return sizes


def chunk_ids(sizes: Sequence[int]) -> torch.Tensor:
    """LongTensor (T,): the chunk index of each step, e.g. [2, 3] -> [0, 0, 1, 1, 1]."""
    sizes = check_sizes(sizes)
    return torch.tensor([k for k, size in enumerate(sizes) for _ in range(size)], dtype=torch.long)  # (T,)


def chunk_boundaries(sizes: Sequence[int]) -> list[int]:
    """Cut points (start step of every chunk after the first), e.g. [2, 3, 4, 7] -> [2, 5, 9]."""
    sizes = check_sizes(sizes)
    return torch.tensor(sizes).cumsum(0)[:-1].tolist()


# 2. Reductions over chunks

def chunk_sum(x: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Sum of x (B, T) over the steps of each chunk -> (B, K). Any leading dims work: (..., T) -> (..., K)."""
    sizes = check_sizes(sizes)
    if x.dim() < 1 or x.shape[-1] != sum(sizes):
        raise WorkbenchError(f"chunk sizes {sizes} cover {sum(sizes)} steps but x has shape {tuple(x.shape)}; "
                             "the last dim must be the number of trained steps")
    ids = chunk_ids(sizes).to(x.device)  # (T,)
    out = x.new_zeros(*x.shape[:-1], len(sizes))  # (B, K)
    return out.index_add(-1, ids, x)  # (B, K)


def chunk_mean(x: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Mean of x (B, T) over the steps of each chunk -> (B, K); of step log-ratios it is GCPO's chunk log-ratio."""
    counts = torch.tensor(check_sizes(sizes), device=x.device)  # (K,) integers: the quotient keeps x's dtype
    return chunk_sum(x, sizes) / counts  # (B, K)


def _check_l1_rel(l1_rel: torch.Tensor | None, num_steps: int, who: str) -> torch.Tensor:
    """Validate the (T,) L1_rel curve: present, 1-D of length T, finite, non-negative."""
    if l1_rel is None:
        raise WorkbenchError(f"{who} needs l1_rel, the (T,) relative L1 change per step; "
                             "compute it from sampled trajectories or use the 'temporal' chunker")
    if not isinstance(l1_rel, torch.Tensor) or l1_rel.dim() != 1 or l1_rel.shape[0] != num_steps:
        shape = tuple(l1_rel.shape) if isinstance(l1_rel, torch.Tensor) else type(l1_rel).__name__
        raise WorkbenchError(f"{who} needs l1_rel of shape ({num_steps},), got {shape}; "
                             "average per-trajectory curves over dim 0 first")
    if not torch.isfinite(l1_rel).all() or (l1_rel < 0).any():
        raise WorkbenchError(f"{who}: l1_rel must be finite and >= 0 (a relative L1 norm), got {l1_rel.tolist()}")
    return l1_rel.double()


# 3. Chunkers

def uniform(num_steps: int, l1_rel: torch.Tensor | None = None, size: int = 4) -> list[int]:
    """Chunks of `size` steps; the last chunk takes the remainder ([4, 4, 2] for T=10). size=1 is step GRPO."""
    _check_num_steps(num_steps)
    if not isinstance(size, Integral) or isinstance(size, bool) or size < 1:
        raise WorkbenchError(f"uniform chunk size must be a positive integer, got {size!r}")
    full, rest = divmod(num_steps, size)
    return [size] * full + ([rest] if rest else [])


CHUNKERS.add(uniform, "uniform", info=ChunkerInfo("chunks of one size", (ChunkOption("size", "chunk size", 4),),
                                               order=10))


def fixed(num_steps: int, l1_rel: torch.Tensor | None = None, sizes: str | Sequence[int] | None = None
          ) -> list[int]:
    """The schedule given in `sizes` ("2,3,4,7" or a list), validated to sum to num_steps."""
    if sizes is None:
        raise WorkbenchError("the 'fixed' chunker needs sizes, e.g. sizes='2,3,4,7'")
    return parse_chunk_spec(sizes, num_steps)


CHUNKERS.add(fixed, "fixed", info=ChunkerInfo("the sizes given", (ChunkOption("sizes", "sizes, e.g. 2,3,4,7",
                                                                                kind=str),), in_menu=False, order=50))


def temporal(num_steps: int, l1_rel: torch.Tensor | None = None) -> list[int]:
    """GCPO's fixed temporal chunking: [2, 3, 4, 7] for T=16 (short chunks at high noise).

    Our generalisation to other T (the paper only gives T=16): scale the fractions 2/16, 3/16, 4/16,
    7/16 to T, round by largest remainder (ties to the earlier chunk), then lift any empty chunk to 1
    step by taking a step from the largest chunk (ties to the later one). T < 4 gives T chunks of 1.
    """
    _check_num_steps(num_steps)
    if num_steps <= len(TEMPORAL_SIZES):
        return [1] * num_steps
    quotas = [num_steps * s / sum(TEMPORAL_SIZES) for s in TEMPORAL_SIZES]
    sizes = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(sizes)), key=lambda j: (-(quotas[j] - sizes[j]), j))
    for j in by_remainder[: num_steps - sum(sizes)]:
        sizes[j] += 1
    for j in range(len(sizes)):
        if sizes[j] == 0:
            # Unreachable for T >= 5 (the rounding above gives every chunk a step; checked for every T up to 1000),
            # so no test can tell its mutants from the original: mutmut leaves these lines alone.
            largest = max(range(len(sizes)), key=lambda k: (sizes[k], k))  # pragma: no mutate (dead code, above)
            sizes[largest] -= 1  # pragma: no mutate (dead code, above)
            sizes[j] = 1  # pragma: no mutate (dead code, above)
    return sizes


CHUNKERS.add(temporal, "temporal", info=ChunkerInfo("GCPO's fixed temporal chunks", order=0))


def _signs_per_step(curve: torch.Tensor, order: int) -> torch.Tensor:
    """Sign (-1, 0, +1) of the order-th backward difference of curve (T,) at each step -> (T,).

    D^k[s] = D^{k-1}[s] - D^{k-1}[s-1] is defined for steps s >= k (torch.diff gives it at index s - k);
    steps s < k have no k-th difference and take the sign of step k. Needs order < T: `_split_adaptive` asks for
    order k only inside a piece of at least 3 steps, and a piece at order k has at most T - k + 1 steps, so k <= T - 2.
    """
    diff = torch.diff(curve, n=order)  # (T - order,), diff[i] belongs to step i + order
    return torch.cat([diff[:1].expand(order), diff]).sign()  # (T,)


def _sign_runs(signs: torch.Tensor) -> list[int]:
    """Lengths of the runs of equal consecutive values in signs (n,)."""
    _, counts = torch.unique_consecutive(signs, return_counts=True)
    return counts.tolist()


def _split_adaptive(curve: torch.Tensor, start: int, size: int, order: int, max_size: int) -> list[int]:
    """Chunk sizes for steps [start, start + size) of curve (T,) by order-th derivative signs, recursing."""
    if size <= max_size:
        return [size]
    runs = _sign_runs(_signs_per_step(curve, order)[start:start + size])
    if len(runs) == 1:  # a single sign: split at the midpoint, the later half takes the odd step
        runs = [size // 2, size - size // 2]
    sizes, offset = [], start
    for run in runs:  # every piece is smaller than the chunk, so the recursion ends
        sizes += _split_adaptive(curve, offset, run, order + 1, max_size)
        offset += run
    return sizes


def adaptive(num_steps: int, l1_rel: torch.Tensor | None = None, max_size: int = 4) -> list[int]:
    """GCPO adaptive chunking (paper v3, no released code; this precise reading is ours).

    1. Take the first backward difference of l1_rel (T,): D[s] = l1_rel[s] - l1_rel[s-1], a length T-1
       sequence assigned to steps 1..T-1; step 0 takes step 1's value. So a step belongs to the trend
       that led into it (the minimum of a dip ends the falling chunk).
    2. Group consecutive steps whose derivative has the same sign (-1, 0 or +1).
    3. If the whole chunk has a single sign, split it at its midpoint (the later half gets the odd step).
    4. Recurse inside every piece larger than max_size with the next-order backward difference of the
       whole curve (steps s < k take the sign of step k for order k), until each chunk has <= max_size
       steps. Chunks of 1 or 2 steps are never split, hence max_size >= 2.
    """
    _check_num_steps(num_steps)
    curve = _check_l1_rel(l1_rel, num_steps, "the 'adaptive' chunker")
    if not isinstance(max_size, Integral) or isinstance(max_size, bool) or max_size < 2:
        raise WorkbenchError(f"adaptive max_size must be an integer >= 2, got {max_size!r}; "
                             "for one-step chunks use the 'uniform' chunker with size=1")
    return _split_adaptive(curve, 0, num_steps, 1, max_size)


CHUNKERS.add(adaptive, "adaptive", info=ChunkerInfo("GCPO's adaptive chunks, cut by the L1_rel curve",
                                                (ChunkOption("max_size", "largest chunk", 4, minimum=2),),
                                                needs_curve=True, order=20))


def equal_mass(num_steps: int, l1_rel: torch.Tensor | None = None, num_chunks: int = 4) -> list[int]:
    """Contiguous chunks with about equal sum of l1_rel (T,); every chunk >= 1 step, min(num_chunks, T) chunks.

    Cut k is the prefix length whose l1_rel mass is closest to k/K of the total, searched left to right
    inside the range that leaves at least one step for each remaining chunk (ties to the earlier cut).
    A curve of all zeros is treated as uniform mass.
    """
    _check_num_steps(num_steps)
    mass = _check_l1_rel(l1_rel, num_steps, "the 'equal_mass' chunker")
    if not isinstance(num_chunks, Integral) or isinstance(num_chunks, bool) or num_chunks < 1:
        raise WorkbenchError(f"equal_mass num_chunks must be a positive integer, got {num_chunks!r}")
    if mass.sum() <= 0:
        mass = torch.ones_like(mass)
    k_total = min(int(num_chunks), num_steps)
    prefix = torch.cat([mass.new_zeros(1), mass.cumsum(0)])  # (T + 1,), prefix[i] = mass of steps < i
    cuts = [0]
    for k in range(1, k_total):
        lo, hi = cuts[-1] + 1, num_steps - (k_total - k)  # allowed cut range, inclusive
        target = prefix[-1] * k / k_total
        cuts.append(lo + int(torch.argmin((prefix[lo:hi + 1] - target).abs())))
    cuts.append(num_steps)
    return [b - a for a, b in zip(cuts, cuts[1:])]


CHUNKERS.add(equal_mass, "equal_mass", info=ChunkerInfo("chunks of equal L1_rel mass",
                                                  (ChunkOption("num_chunks", "number of chunks", 4),),
                                                  needs_curve=True, order=30))


# 4. Chunk specs: sizes or a registered chunker with its options

def chunker_info(name: str) -> ChunkerInfo:
    """The record of a registered chunker (one registered without a record: a plain one, named by its name)."""
    return CHUNKERS.info(name) or ChunkerInfo(name)


def chunker_names(menu: bool = False, without_curve: bool = False) -> list[str]:
    """The registered chunkers in menu order; menu: those the Chunks tab lists; without_curve: those a training
    run can name (they do not read the L1_rel curve)."""
    names = sorted(CHUNKERS.names(), key=lambda name: (chunker_info(name).order, name))
    return [n for n in names if (chunker_info(n).in_menu or not menu)
            and not (without_curve and chunker_info(n).needs_curve)]


def is_chunker_spec(spec) -> bool:
    """Whether a chunk spec names a chunker ("temporal", "uniform:size=4") rather than sizes ("2,3,4,7")."""
    return isinstance(spec, str) and spec.strip()[:1].isalpha()


def parse_chunker(spec: str) -> tuple[str, dict]:
    """"uniform:size=4" -> ("uniform", {"size": 4}), "temporal" -> ("temporal", {}): the name and the options
    checked against the chunker's record (options are separated by commas, so a text option holds none)."""
    name, _, rest = (part.strip() for part in spec.strip().partition(":"))
    if name not in CHUNKERS:
        raise WorkbenchError(f"chunk spec {spec!r} is not a comma-separated list of integers like '2,3,4,7', nor a "
                             f"chunker; valid chunkers: {', '.join(chunker_names())}")
    known = {o.name: o for o in chunker_info(name).options}
    takes = ", ".join(f"{k}=..." for k in known)  # read only when the chunker takes options
    options = {}
    for item in (i.strip() for i in rest.split(",") if rest):
        key, equals, text = (part.strip() for part in item.partition("="))
        if key not in known or not equals:
            raise WorkbenchError(f"chunk spec {spec!r}: the {name} chunker takes {takes}, written like "
                                 f"'{name}:{next(iter(known))}=4'" if known else
                                 f"chunk spec {spec!r}: the {name} chunker takes no options; write '{name}'")
        option = known[key]
        if option.kind is int:
            try:
                text = int(text)
            except ValueError:
                raise WorkbenchError(f"chunk spec {spec!r}: {key} must be a whole number, got {text!r}") from None
            if text < option.minimum:
                raise WorkbenchError(f"chunk spec {spec!r}: {key} must be at least {option.minimum}, got {text}")
        options[key] = text
    return name, options


def schedule(spec: str | Sequence[int], num_steps: int, l1_rel: torch.Tensor | None = None) -> list[int]:
    """Chunk sizes over num_steps from a chunk spec: sizes ("2,3,4,7" or a list) or a chunker with its options
    ("temporal", "uniform:size=4"). A chunker that reads the L1_rel curve needs l1_rel (T,)."""
    if not is_chunker_spec(spec):
        return parse_chunk_spec(spec, num_steps)
    name, options = parse_chunker(spec)
    if chunker_info(name).needs_curve and l1_rel is None:
        raise WorkbenchError(f"the {name} chunker cuts by the L1_rel curve, which is not measured here; give the "
                             f"sizes `workbench chunks --method {name}` prints, or one of "
                             f"{', '.join(chunker_names(menu=True, without_curve=True))}")
    _check_num_steps(num_steps)
    return parse_chunk_spec(CHUNKERS.get(name)(num_steps, l1_rel, **options), num_steps)


# 5. Weighted chunk sampling (GCPO)

def chunk_sampling_weights(sizes: Sequence[int], l1_rel: torch.Tensor) -> torch.Tensor:
    """(K,) probabilities mean_{t in j} l1_rel / sum_k mean_{t in k} l1_rel; uniform if l1_rel is all 0."""
    sizes = check_sizes(sizes)
    curve = _check_l1_rel(l1_rel, sum(sizes), "chunk sampling")
    means = chunk_mean(curve[None], sizes)[0]  # (K,)
    if means.sum() <= 0:
        return torch.full((len(sizes),), 1.0 / len(sizes), dtype=l1_rel.dtype)
    return (means / means.sum()).to(l1_rel.dtype)  # (K,)


def sample_chunks(sizes: Sequence[int], l1_rel: torch.Tensor, fraction: float = 0.5,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """GCPO weighted chunk sampling: LongTensor of distinct chunk indices, sorted ascending.

    Draws max(1, int(fraction * K)) chunks (GCPO's code: `int(num_chunks * timestep_fraction)`, i.e. the
    floor; at least one so that something trains) without replacement (torch.multinomial) with the
    probabilities of `chunk_sampling_weights`. GCPO draws for each trajectory from its own L1_rel
    (docs/methods.md "Weighted chunk sampling"); pass that trajectory's curve (T,).
    """
    if not 0.0 < fraction <= 1.0:
        raise WorkbenchError(f"chunk sampling fraction must be in (0, 1], got {fraction}")
    probs = chunk_sampling_weights(sizes, l1_rel).double()  # (K,)
    count = max(1, int(fraction * len(probs) + 1e-9))
    positive = int((probs > 0).sum())
    if positive < count:
        raise WorkbenchError(f"only {positive} of {len(probs)} chunks have l1_rel mass > 0, cannot draw {count} "
                             "without replacement; lower the fraction")
    chosen = torch.multinomial(probs, count, replacement=False, generator=generator)  # (count,)
    return chosen.sort().values


def step_mask_from_chunks(sizes: Sequence[int], chosen: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """BoolTensor (T,): True at the steps of the chosen chunks (integer indices, e.g. `sample_chunks`' draw)."""
    ids = chunk_ids(sizes)  # (T,)
    chosen = torch.as_tensor(chosen).reshape(-1)  # (n,); an empty list comes as float, and chooses no chunk
    if chosen.numel() and (chosen.dtype == torch.bool or chosen.is_floating_point()):
        raise WorkbenchError(f"chosen chunks must be integer indices, got {chosen.tolist()}")
    if ((chosen < 0) | (chosen >= len(sizes))).any():
        raise WorkbenchError(f"chosen chunks {chosen.tolist()} must be indices in 0..{len(sizes) - 1}")
    return torch.isin(ids, chosen)  # (T,)


# 6. Editing a schedule (the Chunks tab's split, merge and click-to-toggle)

def split_at(sizes: list[int], step: int) -> list[int]:
    """Cut the chunk that contains `step` so that a new chunk starts at `step` (1 <= step <= T - 1)."""
    sizes = check_sizes(sizes)
    total = sum(sizes)
    if not 1 <= step <= total - 1:
        raise WorkbenchError(f"a chunk can start at steps 1..{total - 1}, not at step {step}; move the slider")
    cuts = chunk_boundaries(sizes)
    if step in cuts:
        raise WorkbenchError(f"a chunk already starts at step {step} (chunks start at steps {cuts}); choose another "
                             "step")
    cuts = sorted([*cuts, step])
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:])]


def merge_at(sizes: list[int], step: int) -> list[int]:
    """Remove the boundary at `step` (where a chunk starts), merging the chunks on either side of it."""
    sizes = check_sizes(sizes)
    cuts = chunk_boundaries(sizes)
    if step not in cuts:
        where = f"chunks start at steps {cuts}" if cuts else "there is only one chunk"
        raise WorkbenchError(f"no chunk starts at step {step}, so nothing merges there; {where}")
    edges = [0, *[c for c in cuts if c != step], sum(sizes)]
    return [b - a for a, b in zip(edges, edges[1:])]


def toggle_boundary(sizes: list[int], after: int) -> list[int]:
    """Add or remove the chunk boundary after step `after` (0 <= after <= T - 2).

    The boundary after step t lies between steps t and t + 1, where the curve draws a dashed line at
    t + 0.5: with it a chunk starts at step t + 1 (`split_at(sizes, t + 1)`), without it steps t and
    t + 1 share a chunk (`merge_at(sizes, t + 1)`). [2, 3, 4, 7] toggled after 1 gives [5, 4, 7].
    """
    sizes = check_sizes(sizes)
    last = sum(sizes) - 1
    if not 0 <= after < last:
        raise WorkbenchError(f"a boundary can follow steps 0..{last - 1}, not step {after}"
                             + (" (the last step ends the last chunk)" if after == last else "")
                             + "; click an earlier step")
    cut = after + 1
    return merge_at(sizes, cut) if cut in chunk_boundaries(sizes) else split_at(sizes, cut)
