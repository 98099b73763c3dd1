"""Chunk schedules, chunk reductions, chunkers and weighted chunk sampling (GCPO; docs/methods.md "Chunk schedules")."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.chunker_info import ChunkerInfo, ChunkOption
from workbench.rl.chunking import (
    CHUNKERS,
    check_sizes,
    chunk_boundaries,
    chunk_ids,
    chunk_mean,
    chunk_sampling_weights,
    chunk_sum,
    merge_at,
    parse_chunk_spec,
    parse_chunker,
    sample_chunks,
    schedule,
    split_at,
    step_mask_from_chunks,
    toggle_boundary,
)

# Parsing

def test_parse_sizes_and_boundaries():
    assert parse_chunk_spec("2,3,4,7", 16) == [2, 3, 4, 7]
    assert parse_chunk_spec(" 2, 3 ,4,7 ", 16) == [2, 3, 4, 7]
    assert parse_chunk_spec("[2,3,4,7]", 16) == [2, 3, 4, 7]
    assert parse_chunk_spec([8, 8], 16) == [8, 8]
    assert parse_chunk_spec("2,5,9", 16, as_boundaries=True) == [2, 3, 4, 7]
    assert parse_chunk_spec([1], 3, as_boundaries=True) == [1, 2]


@pytest.mark.parametrize("spec, steps, bounds, message", [
    ("2,a", 16, False, r"'a' is not an integer.*'2,3,4,7'"),
    ("2,,14", 16, False, "not an integer"),
    ([2, 2.5], 16, False, "only integers"),
    ("2,0,14", 16, False, ">= 1"),
    ("4,-1,13", 16, False, ">= 1"),
    ("2,3", 16, False, r"sum to 5 but there are 16 trained steps.*sum to 16"),
    ("", 16, False, "empty"),
    ([], 16, True, "empty"),
    ("0,5", 16, True, r"1\.\.15"),
    ("5,16", 16, True, r"1\.\.15"),
    ("5,2", 16, True, "strictly increasing"),
    ("5,5", 16, True, "strictly increasing"),
    ("2,3,4,7", 0, False, "positive integer"),
    ("16]", 16, False, "not an integer"),  # a bracket only counts in a pair: "16]" is no list
    ("[16", 16, False, "not an integer"),
])
def test_bad_specs_say_what_is_wrong(spec, steps, bounds, message):
    with pytest.raises(WorkbenchError, match=message):
        parse_chunk_spec(spec, steps, as_boundaries=bounds)


@pytest.mark.parametrize("sizes", [[2.0, 3], [True, 4], [np.int64(2), 2.5]])
def test_chunk_sizes_must_be_whole_numbers(sizes):
    with pytest.raises(WorkbenchError, match="chunk sizes must be integers"):
        check_sizes(sizes)
    assert check_sizes([np.int64(2), 3]) == [2, 3]  # numpy integers are integers


def test_chunk_ids_and_boundaries():
    assert chunk_ids([2, 3]).tolist() == [0, 0, 1, 1, 1]
    assert chunk_ids([2, 3]).dtype == torch.long
    assert chunk_boundaries([2, 3, 4, 7]) == [2, 5, 9]
    assert chunk_boundaries([16]) == []
    sizes = [3, 1, 5]
    assert parse_chunk_spec(chunk_boundaries(sizes), 9, as_boundaries=True) == sizes


# Reductions

def _loop_reference(x: torch.Tensor, sizes: list[int], reduce) -> torch.Tensor:
    out, start = [], 0
    for s in sizes:
        out.append(torch.stack([reduce(row[start:start + s]) for row in x]))
        start += s
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("sizes", [[2, 3, 4, 7], [1] * 16, [16], [5, 1, 10]])
def test_chunk_sum_and_mean_match_loop(sizes):
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.allclose(chunk_sum(x, sizes), _loop_reference(x, sizes, torch.sum))
    assert torch.allclose(chunk_mean(x, sizes), _loop_reference(x, sizes, torch.mean))


def test_chunk_mean_invariants_and_gradient():
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert torch.equal(chunk_mean(x, [1] * 6), x)  # size-1 chunks are the steps themselves
    assert torch.allclose(chunk_mean(x, [6])[:, 0], x.mean(dim=1))  # one chunk is the sequence mean
    chunk_mean(x, [2, 4]).sum().backward()
    assert torch.allclose(x.grad, torch.tensor([[0.5] * 2 + [0.25] * 4] * 2))
    for dtype in (torch.float64, torch.bfloat16):  # the chunk means keep the log-ratios' precision
        assert chunk_mean(x.detach().to(dtype), [2, 4]).dtype == dtype


def test_chunk_reductions_check_length():
    with pytest.raises(WorkbenchError, match="cover 16 steps"):
        chunk_mean(torch.zeros(2, 15), [2, 3, 4, 7])


# Chunkers

def test_temporal_matches_paper_and_sums_to_t():
    assert CHUNKERS.get("temporal")(16) == [2, 3, 4, 7]
    for t in range(1, 41):
        sizes = CHUNKERS.get("temporal")(t)
        assert sum(sizes) == t and min(sizes) >= 1 and len(sizes) == min(4, t)
        assert sizes == sorted(sizes)  # short chunks at high noise, as in the paper


def test_uniform_and_fixed():
    assert CHUNKERS.get("uniform")(10) == [4, 4, 2]
    assert CHUNKERS.get("uniform")(8, size=2) == [2, 2, 2, 2]
    assert CHUNKERS.get("uniform")(3, size=1) == [1, 1, 1]
    assert CHUNKERS.get("fixed")(16, sizes="8,8") == [8, 8]
    with pytest.raises(WorkbenchError, match="sum to 12"):
        CHUNKERS.get("fixed")(16, sizes=[4, 8])
    with pytest.raises(WorkbenchError, match=r"^the 'fixed' chunker needs sizes, e\.g\. sizes='2,3,4,7'$"):
        CHUNKERS.get("fixed")(16)


def test_chunker_records_refuse_repeated_option_names():
    size = ChunkOption("size", "chunk size", 4)
    with pytest.raises(WorkbenchError, match="^" + re.escape("chunker options must have distinct names, got "
                                                             "['size', 'size']") + "$"):
        ChunkerInfo("twice", (size, size), in_menu=False)


def test_a_chunker_in_the_menu_takes_at_most_one_integer_option():
    """The Chunks tab has one number field: two options, or a text option, need in_menu=False."""
    message = ("the Chunks tab has one number field: a chunker in its menu takes at most one integer option "
               "(register it with in_menu=False otherwise)")
    two = (ChunkOption("size", "chunk size", 4), ChunkOption("count", "chunks", 2))
    text = (ChunkOption("sizes", "sizes, e.g. 2,3,4,7", kind=str),)
    for options in (two, text):
        with pytest.raises(WorkbenchError, match=f"^{re.escape(message)}$"):
            ChunkerInfo("too much for one field", options)
        assert ChunkerInfo("off the menu", options, in_menu=False).options == options
    assert ChunkerInfo("one number", two[:1]).option() == two[0]


def test_adaptive_splits_at_the_turning_point():
    curve = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 2.0, 3.0, 4.0])
    # first backward differences: steps 0-4 falling, 5-7 rising -> runs [5, 3]; the run of 5 is
    # larger than max_size 4, its second differences are all 0 (one sign) -> midpoint split [2, 3]
    assert CHUNKERS.get("adaptive")(8, curve) == [2, 3, 3]
    assert CHUNKERS.get("adaptive")(8, curve, max_size=5) == [5, 3]


def test_adaptive_chunks_respect_sign_changes():
    curve = torch.tensor([9.0, 7.0, 6.0, 5.5, 5.2, 5.1, 6.0, 7.5, 8.0, 9.0, 10.0, 12.0])
    sizes = CHUNKERS.get("adaptive")(12, curve, max_size=4)
    assert sum(sizes) == 12 and max(sizes) <= 4
    assert 6 in chunk_boundaries(sizes)  # step 6 is the first rising step
    rising = torch.diff(curve) > 0  # (T - 1,), entry s - 1 belongs to step s
    for chunk in range(len(sizes)):
        steps = (chunk_ids(sizes) == chunk).nonzero().flatten().clamp_min(1)
        assert len(set(rising[steps - 1].tolist())) == 1


def test_adaptive_recurses_with_higher_differences_at_each_piece_own_offset():
    """Three runs, two of them split again with the second difference at their own steps (worked by hand).

    curve (T = 8): 6, 8, 5, 4, 1, 2, 3, 4
    D1 at steps 1..7: 2, -3, -1, -3, 1, 1, 1 (step 0 takes step 1's +); signs + + - - - + + + -> runs [2, 3, 3]
    max_size 2: the runs of 3 (steps 2-4 and 5-7) recurse with D2 at steps 2..7: -5, 2, -2, 4, 0, 0
    steps 2-4: signs - + - -> [1, 1, 1]; steps 5-7: signs + 0 0 -> [1, 2]
    (the first difference again would give one sign in each, halved to [1, 2]; the third difference, or the third
    piece read at steps 3-5, would cut other chunks)
    """
    curve = torch.tensor([6.0, 8.0, 5.0, 4.0, 1.0, 2.0, 3.0, 4.0])
    assert CHUNKERS.get("adaptive")(8, curve, max_size=2) == [2, 1, 1, 1, 1, 2]


def test_adaptive_on_monotone_curve_halves():
    sizes = CHUNKERS.get("adaptive")(16, torch.linspace(1.0, 0.1, 16))  # one sign, second diffs ~0
    assert sum(sizes) == 16 and max(sizes) <= 4 and sizes[:2] != [16]


def test_adaptive_bad_input():
    with pytest.raises(WorkbenchError, match="^the 'adaptive' chunker needs l1_rel"):
        CHUNKERS.get("adaptive")(8)
    with pytest.raises(WorkbenchError, match=r"shape \(8,\).*average"):
        CHUNKERS.get("adaptive")(8, torch.rand(3, 8))
    for max_size in (1, 2.5, True):  # too small, not an integer, a bool
        with pytest.raises(WorkbenchError, match="max_size must be an integer >= 2, got .*; for one-step chunks "
                                                 "use the 'uniform' chunker with size=1$"):
            CHUNKERS.get("adaptive")(8, torch.rand(8), max_size=max_size)


def test_the_curve_chunkers_name_themselves_when_the_curve_is_missing():
    for name in ("adaptive", "equal_mass"):
        with pytest.raises(WorkbenchError, match=f"^the '{name}' chunker needs l1_rel, the \\(T,\\) relative"):
            CHUNKERS.get(name)(8)


def test_equal_mass_hand_cases():
    assert CHUNKERS.get("equal_mass")(6, torch.tensor([3.0, 1, 1, 1, 1, 1]), num_chunks=2) == [2, 4]
    assert CHUNKERS.get("equal_mass")(8, torch.ones(8)) == [2, 2, 2, 2]
    assert CHUNKERS.get("equal_mass")(8, torch.zeros(8)) == [2, 2, 2, 2]
    assert CHUNKERS.get("equal_mass")(3, torch.ones(3), num_chunks=4) == [1, 1, 1]
    front_loaded = CHUNKERS.get("equal_mass")(16, torch.linspace(1.0, 0.0, 16) ** 2)
    assert front_loaded == sorted(front_loaded) and front_loaded[0] < front_loaded[-1]


@pytest.mark.parametrize("t", [1, 2, 3, 5, 16, 17, 33])
def test_all_chunkers_sum_to_t_on_random_curves(t):
    gen = torch.Generator().manual_seed(t)
    for _ in range(5):
        curve = torch.rand(t, generator=gen)
        for name, options in [("uniform", {}), ("uniform", {"size": 3}), ("temporal", {}), ("fixed", {"sizes": [t]}),
                              ("adaptive", {}), ("adaptive", {"max_size": 2}), ("equal_mass", {}),
                              ("equal_mass", {"num_chunks": 7})]:
            sizes = CHUNKERS.get(name)(t, curve, **options)
            assert sum(sizes) == t and min(sizes) >= 1, (name, options, sizes)
            if name == "adaptive":
                assert max(sizes) <= options.get("max_size", 4)


def test_unknown_chunker_lists_valid_names():
    with pytest.raises(WorkbenchError) as info:
        CHUNKERS.get("random")
    for name in ("adaptive", "equal_mass", "fixed", "temporal", "uniform"):
        assert name in str(info.value)


def test_chunker_specs_read_their_options_around_spaces():
    assert parse_chunker("temporal") == ("temporal", {})
    assert parse_chunker(" uniform : size = 4 ") == ("uniform", {"size": 4})
    assert schedule("uniform: size = 4", 10) == [4, 4, 2]


def test_a_chunker_spec_sets_several_options_separated_by_commas():
    """A chunker with two options (none built in has more than one): each `key=value` between commas sets one,
    and a wrong key lists every option the chunker takes."""
    def ends(num_steps, l1_rel=None, first=1, last=1):
        return [first, num_steps - first - last, last]
    CHUNKERS.add(ends, "ends", info=ChunkerInfo("a first and a last chunk", (
        ChunkOption("first", "steps of the first chunk", 1), ChunkOption("last", "steps of the last chunk", 1)),
        in_menu=False))
    try:
        assert parse_chunker("ends:first=2,last=3") == ("ends", {"first": 2, "last": 3})
        assert schedule("ends:first=2, last=3", 10) == [2, 5, 3]
        with pytest.raises(WorkbenchError, match="^" + re.escape("chunk spec 'ends:middle=4': the ends chunker takes "
                                                                 "first=..., last=..., written like 'ends:first=4'")
                           + "$"):
            parse_chunker("ends:middle=4")
    finally:
        CHUNKERS.unregister("ends")


@pytest.mark.parametrize("spec, message", [
    ("zigzag:size=2", "chunk spec 'zigzag:size=2' is not a comma-separated list of integers like '2,3,4,7', nor a "
                      "chunker; valid chunkers: temporal, uniform, adaptive, equal_mass, fixed"),
    ("uniform:width=4", "chunk spec 'uniform:width=4': the uniform chunker takes size=..., written like "
                        "'uniform:size=4'"),
    ("uniform:size", "chunk spec 'uniform:size': the uniform chunker takes size=..., written like 'uniform:size=4'"),
    ("temporal:size=4", "chunk spec 'temporal:size=4': the temporal chunker takes no options; write 'temporal'"),
    ("uniform:size==4", "chunk spec 'uniform:size==4': size must be a whole number, got '=4'"),  # split at the first =
    ("uniform:size=0", "chunk spec 'uniform:size=0': size must be at least 1, got 0"),
])
def test_bad_chunker_specs_say_what_the_chunker_takes(spec, message):
    with pytest.raises(WorkbenchError, match="^" + re.escape(message) + "$"):
        parse_chunker(spec)


@pytest.mark.parametrize("size", [0, -1, True, 2.0])
def test_uniform_refuses_a_size_that_is_not_a_positive_integer(size):
    with pytest.raises(WorkbenchError, match="^" + re.escape(f"uniform chunk size must be a positive integer, got "
                                                             f"{size!r}") + "$"):
        CHUNKERS.get("uniform")(10, size=size)


# Weighted chunk sampling

def test_chunk_sampling_weights_hand_case():
    weights = chunk_sampling_weights([2, 2], torch.tensor([1.0, 1.0, 3.0, 3.0]))
    assert torch.allclose(weights, torch.tensor([0.25, 0.75]))
    assert torch.allclose(chunk_sampling_weights([1, 3], torch.tensor([2.0, 1.0, 2.0, 3.0])), torch.tensor([0.5, 0.5]))
    flat = chunk_sampling_weights([1, 2, 3], torch.zeros(6, dtype=torch.float64))  # no l1_rel mass: uniform
    assert flat.dtype == torch.float64 and torch.allclose(flat, torch.full((3,), 1 / 3, dtype=torch.float64))


def test_chunk_sampling_weights_of_a_curve_below_one():
    """Measured L1_rel values are well below 1 (their sum too): still weighted by chunk mean, not uniform."""
    weights = chunk_sampling_weights([2, 2], torch.tensor([0.1, 0.1, 0.3, 0.3]))
    assert torch.allclose(weights, torch.tensor([0.25, 0.75]))


@pytest.mark.parametrize("curve, message", [
    (torch.ones(3), "chunk sampling needs l1_rel of shape (4,), got (3,); average per-trajectory curves over dim 0 "
                    "first"),
    (torch.tensor([1.0, -1.0, 1.0, 1.0]), "chunk sampling: l1_rel must be finite and >= 0 (a relative L1 norm), got "
                                          "[1.0, -1.0, 1.0, 1.0]"),
    (torch.tensor([1.0, float("nan"), 1.0, 1.0]), "chunk sampling: l1_rel must be finite and >= 0 (a relative L1 "
                                                  "norm), got [1.0, nan, 1.0, 1.0]"),
    (None, "chunk sampling needs l1_rel, the (T,) relative L1 change per step; compute it from sampled trajectories "
           "or use the 'temporal' chunker"),
    ([1.0, 1.0, 1.0, 1.0], "chunk sampling needs l1_rel of shape (4,), got list; average per-trajectory curves over "
                           "dim 0 first"),
    (torch.ones(4, 4), "chunk sampling needs l1_rel of shape (4,), got (4, 4); average per-trajectory curves over dim "
                       "0 first"),
])
def test_chunk_sampling_weights_name_chunk_sampling_in_their_messages(curve, message):
    with pytest.raises(WorkbenchError, match="^" + re.escape(message) + "$"):
        chunk_sampling_weights([2, 2], curve)


def test_sample_chunks_cannot_draw_more_chunks_than_have_mass():
    l1 = torch.tensor([1.0, 1.0, 0.0, 0.0, 2.0, 2.0])  # the middle chunk has no mass: 2 of 3 can be drawn
    assert sample_chunks([2, 2, 2], l1, fraction=2 / 3).tolist() == [0, 2]
    with pytest.raises(WorkbenchError, match="^" + re.escape("only 2 of 3 chunks have l1_rel mass > 0, cannot draw 3 "
                                                             "without replacement; lower the fraction") + "$"):
        sample_chunks([2, 2, 2], l1, fraction=1.0)


def test_sample_chunks_draws_from_the_generator_given():
    """The draw depends on the generator's seed alone, not on torch's global random state."""
    l1 = torch.rand(16, generator=torch.Generator().manual_seed(0)) + 0.1
    with torch.random.fork_rng():
        draws = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            gen = torch.Generator().manual_seed(5)
            draws.append([sample_chunks([1] * 16, l1, fraction=0.25, generator=gen).tolist() for _ in range(10)])
    assert draws[0] == draws[1]
    assert len({tuple(d) for d in draws[0]}) > 1  # ten draws from one generator differ among themselves


def test_sample_chunks_count_and_no_replacement():
    gen = torch.Generator().manual_seed(0)
    l1 = torch.rand(16, generator=gen) + 0.1
    sizes = [2, 3, 4, 7]
    for _ in range(50):
        chosen = sample_chunks(sizes, l1, generator=gen)
        assert chosen.dtype == torch.long and len(chosen) == 2 and len(set(chosen.tolist())) == 2
    assert len(sample_chunks(sizes, l1, fraction=1.0, generator=gen).unique()) == 4
    assert len(sample_chunks(sizes, l1, fraction=0.01, generator=gen)) == 1
    assert len(sample_chunks([1] * 5, torch.ones(5), fraction=0.5, generator=gen)) == 2  # int(2.5): GCPO's floor
    with pytest.raises(WorkbenchError, match="fraction"):
        sample_chunks(sizes, l1, fraction=0.0)


def test_weighted_sampling_frequencies_follow_weights():
    gen = torch.Generator().manual_seed(0)
    l1 = torch.tensor([1.0, 1.0, 2.0, 2.0, 7.0, 7.0])  # chunk means 1, 2, 7 -> p = 0.1, 0.2, 0.7
    draws = torch.cat([sample_chunks([2, 2, 2], l1, fraction=0.2, generator=gen) for _ in range(3000)])
    freq = torch.bincount(draws, minlength=3).double() / len(draws)
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64), atol=0.03)


def test_step_mask_from_chunks():
    mask = step_mask_from_chunks([2, 3, 4, 7], torch.tensor([1, 3]))
    assert mask.dtype == torch.bool
    assert mask.nonzero().flatten().tolist() == [2, 3, 4, 9, 10, 11, 12, 13, 14, 15]
    with pytest.raises(WorkbenchError, match="0..3"):
        step_mask_from_chunks([2, 3, 4, 7], [4])
    assert step_mask_from_chunks([2, 3, 4, 7], [0]).nonzero().flatten().tolist() == [0, 1]  # the first chunk: index 0
    with pytest.raises(WorkbenchError, match=r"^chosen chunks \[-1\] must be indices in 0\.\.3$"):
        step_mask_from_chunks([2, 3, 4, 7], [-1])


def test_step_mask_from_chunks_takes_integer_indices_only():
    """A chunk index is a whole number: 1.5 or True is refused, not read as chunk 1; no index chooses no step."""
    assert step_mask_from_chunks([2, 2], []).tolist() == [False] * 4
    assert step_mask_from_chunks([2, 2], np.array([1], dtype=np.int32)).tolist() == [False, False, True, True]
    for bad, shown in (([1.5], "[1.5]"), ([True], "[True]"), (torch.tensor([1.0]), "[1.0]")):
        with pytest.raises(WorkbenchError, match="^" + re.escape(f"chosen chunks must be integer indices, got {shown}")
                           + "$"):
            step_mask_from_chunks([2, 2], bad)


def exact_inclusion(probs: list[float], count: int) -> list[float]:
    """P(chunk j is among `count` successive draws without replacement), by enumerating every ordered draw."""
    import itertools

    out = [0.0] * len(probs)
    for order in itertools.permutations(range(len(probs)), count):
        p, left = 1.0, 1.0
        for j in order:
            p *= probs[j] / left
            left -= probs[j]
        for j in order:
            out[j] += p
    return out


def test_inclusion_frequencies_match_the_weights_without_replacement():
    """Two of five chunks drawn by weight: each chunk's inclusion frequency over many draws equals the exact
    inclusion probability of successive weighted draws without replacement (GCPO's torch.multinomial)."""
    gen = torch.Generator().manual_seed(1)
    sizes = [2, 3, 4, 4, 3]
    l1 = torch.tensor([5.0] * 2 + [3.0] * 3 + [1.0] * 4 + [0.5] * 4 + [2.0] * 3)  # chunk means 5, 3, 1, 0.5, 2
    probs = chunk_sampling_weights(sizes, l1).tolist()
    draws = 20000
    counts = torch.zeros(5)
    for _ in range(draws):
        counts[sample_chunks(sizes, l1, fraction=0.5, generator=gen)] += 1  # int(0.5 * 5) = 2 chunks each
    expected = torch.tensor(exact_inclusion(probs, 2))
    assert torch.allclose(expected.sum(), torch.tensor(2.0))
    se = (expected * (1 - expected) / draws).sqrt()
    assert ((counts / draws - expected).abs() < 4 * se).all(), (counts / draws, expected)


# Editing a schedule (split, merge, click-to-toggle)
def test_split_and_merge():
    assert split_at([2, 3, 4, 7], 3) == [2, 1, 2, 4, 7] and merge_at([2, 3, 4, 7], 5) == [2, 7, 7]
    with pytest.raises(WorkbenchError, match="already starts"):
        split_at([2, 2], 2)
    with pytest.raises(WorkbenchError, match="no chunk starts at step 1, so nothing merges there"):
        merge_at([2, 2], 1)
    with pytest.raises(WorkbenchError, match="steps 1..3"):
        split_at([2, 2], 4)


def test_split_and_merge_errors_say_where_chunks_start():
    with pytest.raises(WorkbenchError, match=re.escape("a chunk already starts at step 2 (chunks start at steps [2]); "
                                                       "choose another step") + "$"):
        split_at([2, 2], 2)
    with pytest.raises(WorkbenchError, match=re.escape("nothing merges there; chunks start at steps [2, 5, 9]") + "$"):
        merge_at([2, 3, 4, 7], 3)
    with pytest.raises(WorkbenchError, match=re.escape("nothing merges there; there is only one chunk") + "$"):
        merge_at([16], 3)


def test_toggle_boundary_adds_and_removes_the_boundary_after_a_step():
    assert toggle_boundary([2, 3, 4, 7], 1) == [5, 4, 7]  # the boundary after step 1 (a chunk started at 2) goes
    assert toggle_boundary([5, 4, 7], 1) == [2, 3, 4, 7]  # and comes back
    assert toggle_boundary([2, 3, 4, 7], 0) == [1, 1, 3, 4, 7]
    assert toggle_boundary([16], 14) == [15, 1]
    with pytest.raises(WorkbenchError, match="the last step ends the last chunk"):
        toggle_boundary([2, 3, 4, 7], 15)
    with pytest.raises(WorkbenchError, match="steps 0..14"):
        toggle_boundary([2, 3, 4, 7], -1)


def test_toggle_boundary_errors_name_the_steps_a_boundary_can_follow():
    """The last step gets its reason; any other step out of range only the range; both end with what to do."""
    with pytest.raises(WorkbenchError, match=re.escape("a boundary can follow steps 0..14, not step 15 (the last step "
                                                       "ends the last chunk); click an earlier step") + "$"):
        toggle_boundary([2, 3, 4, 7], 15)
    with pytest.raises(WorkbenchError, match="^" + re.escape("a boundary can follow steps 0..14, not step 20; "
                                                             "click an earlier step") + "$"):
        toggle_boundary([2, 3, 4, 7], 20)


def test_equal_mass_on_a_curve_with_little_mass_and_its_checks():
    # mass 0.6 in all: prefix 0, .05, .1, .15, .6; half is .3, closest at 3 steps (uniform would cut at 2)
    curve = torch.tensor([0.05, 0.05, 0.05, 0.45])
    assert CHUNKERS.get("equal_mass")(4, curve, num_chunks=2) == [3, 1]
    for bad in (True, 2.0, 0):
        with pytest.raises(WorkbenchError, match="num_chunks must be a positive integer"):
            CHUNKERS.get("equal_mass")(4, curve, num_chunks=bad)


def test_chunk_sampling_fraction_and_chosen_indices_are_checked():
    with pytest.raises(WorkbenchError, match=r"fraction must be in \(0, 1\]"):
        sample_chunks([2, 2], torch.ones(4), fraction=1.5)
    assert len(sample_chunks([2, 2], torch.ones(4), fraction=1.0)) == 2
    assert step_mask_from_chunks([2, 2], [0]).tolist() == [True, True, False, False]
    with pytest.raises(WorkbenchError, match="must be indices in 0..1"):
        step_mask_from_chunks([2, 2], [2])
