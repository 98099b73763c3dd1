"""Mutants of scripts/mutation_check.py that no test can tell from the original, each with the reason.

Keys name the module (under workbench/), the function (dotted, '' at module level), the source line as
written (stripped) and the mutation as the script prints it (`1 -> 2 #2` is the second `1 -> 2` of a line).
They are reported apart in docs/mutation.md and left out of the score.
"""

from __future__ import annotations

# (module, function, source line stripped, mutation) -> why no test can tell the mutant from the original.
EQUIVALENT: dict[tuple[str, str, str, str], str] = {
    ("rl/advantages.py", "grpo", "std = r.std(dim=1, unbiased=True) if r.shape[1] > 1 else std  # (N,)", "> -> >="):
        "`_check_rewards` refuses G < 2, so `G > 1` and `G >= 1` are both always true",
    ("flow/dynamics.py", "dynamics_curve", "batch: int = 16, progress=None) -> DynamicsCurve:", "16 -> 17"):
        "the batch only splits the prompts into sampling calls and every prompt keeps its own seed, so the curves "
        "are the same (tests/test_dynamics.py checks batch 2 against 16)",
    ("train/store.py", "RunStore.save_checkpoint", "shutil.rmtree(p, ignore_errors=True)", "True -> False"):
        "differs only when removing an old checkpoint folder fails, which a test running as root on a local disk "
        "cannot cause without replacing shutil.rmtree itself",
    ("rl/significance.py", "_beta_fraction.tiny", "return v.masked_fill(v.abs() < _TINY, _TINY)", "< -> <="):
        "a value of exactly _TINY is replaced by _TINY: the same number",
    ("rl/significance.py", "_beta_fraction", "for m in range(1, iters + 1):", "1 -> 2 #2"):
        "one more term allowed: the loop stops at convergence (tens of terms) long before 300",
    ("rl/significance.py", "_beta_fraction", "if bool(((delta - 1).abs() <= eps).all()):", "<= -> <"):
        "differs only when a last factor is exactly 1 +- 1e-15; then one more factor of 1 +- 1e-15 follows",
    ("rl/significance.py", "_beta_fraction", "if bool(((delta - 1).abs() <= eps).all()):", "- -> +"):
        "the loop no longer stops early but runs its 300 terms: past convergence every further factor is 1 to "
        "within 1e-15, so only the time changes",
    ("rl/significance.py", "_beta_fraction", "if bool(((delta - 1).abs() <= eps).all()):", "1 -> 2"):
        "as `- -> +`: the loop no longer stops early, and past convergence every further factor is 1 to 1e-15",
    ("rl/explain.py", "moved_log_probs", "optimizer.zero_grad(set_to_none=True)", "True -> False"):
        "every trainable parameter gets a gradient at every update, so the next backward adds to zeros or starts "
        "from None with the same result",
    ("rl/significance.py", "determined", "ratio = torch.where(ratio.isnan() | (credit == 0), 0.0, ratio)",
     "0.0 -> 1.0"): "the ratio is NaN only where the error is NaN or the credit is 0, and both are refused by the "
     "last line whatever p is",
    ("rl/significance.py", "incomplete_beta", "inner = x.clamp(1e-300, 1 - 1e-16)", "- -> +"):
        "1 + 1e-16 rounds to 1.0; it only changes x = 1, whose result is set to 1 afterwards",
    ("rl/significance.py", "incomplete_beta", "direct = x < (a + 1) / (a + b + 2)  # the fraction converges fast "
     "here; else use I_x(a, b) = 1 - I_{1-x}(b, a)", "1 -> 2"):
        "moves the switch between I_x(a, b) and 1 - I_{1-x}(b, a), two exact forms of the same value; near the "
        "switch both continued fractions converge well within their 300 terms",
    ("flow/policy.py", "FlowPolicy.velocity", "sigma = sigma.expand(x.shape[0]) if sigma.dim() == 0 or "
     "sigma.numel() == 1 else sigma  # (B,)", "== -> !="):
        "expanding a (B,) sigma to B is the identity, and a sigma of another length fails either way",
    ("rl/explain.py", "explain", "share = torch.where(total > 0, weight.abs() / total.clamp_min(1e-300), "
     "torch.zeros_like(weight))", "> -> >="):
        "where the total is 0 every weight is 0 and 0 / 1e-300 is the same 0",
    **{("rl/credit_estimators.py", function, f"def {function}(policy, group, reward_fn, continuations: int = 1, "
        "seed: int = 0, crn: bool = True,", mutation): "the look-ahead estimators take M, the seed and CRN only to "
       "share the Monte-Carlo estimator's signature: the ODE has no noise and x0 no continuation"
       for function in ("ode_completion", "denoised_prediction") for mutation in ("1 -> 2", "0 -> 1", "True -> False")},
    ("rl/credit_estimators.py", "denoised_prediction",
     "dtype=torch.float32).cpu() for xb in x0.split(256)]).view(g, t)", "256 -> 257"):
        "decoding and rewarding in slices of 257 instead of 256 gives the same values",
    ("rl/credit_estimators.py", "noise_seed", "return hash((seed, traj, k, step, -1 if start is None else start)) & "
     "(2 ** 63 - 1)", "1 -> 2 #2"): "clears the seed's lowest bit: every key keeps a seed of its own (tested), so the "
     "continuations stay independent draws",
    ("rl/credit_stats.py", "classify", "cls = torch.where(signed > 0, ALIGNED, MISATTRIBUTED)", "> -> >="):
        "a cell with d sign(A) = 0 is never determined, so it ends UNDETERMINED either way",
    **{("rl/credit_stats.py", "ratio_and_se", "big_x, big_y = x.sum(-1).double(), y.sum(-1).double()  # (G,)",
        mutation): "x and y are (G, J): summing over axis 1 is summing over axis -1"
       for mutation in ("drop -", "drop - #2")},
    ("rl/credit_stats.py", "rates", "against = (credit * advantages.sign()[:, None] < 0).double() * v",
     "* -> / #2"):
        "sign(A) is +-1 on every counted cell, where dividing by it is multiplying by it; cells with A = 0 are "
        "multiplied by valid = 0 afterwards",
    **{("rl/credit_stats.py", "_paired_covariance", line, mutation): "a sample covariance needs only one of the "
       "two means right: sum (a - ma)(b - mb') = sum (a - ma)(b - mb) because sum (a - ma) = 0 over the pairs (and "
       "entries outside the pairs are multiplied by `both` = 0; m < 2 is masked out)"
       for line, mutations in (("a, b = torch.where(both, xa, 0.0), torch.where(both, xb, 0.0)",
                                ("0.0 -> 1.0", "0.0 -> 1.0 #2")),
                               ("ma, mb = a.sum(-1) / m.clamp_min(1), b.sum(-1) / m.clamp_min(1)",
                                ("/ -> *", "/ -> * #2", "1 -> 2", "1 -> 2 #2")))
       for mutation in mutations},
    ("rl/credit.py", "_allocate", "for i in priority.sum(1).argsort(descending=True, stable=True).tolist():",
     "True -> False #2"): "torch's CPU sort returns ties in index order for tensors this small even when not asked "
     "to (tests/test_credit_by_hand.py checks the tie order with stable=True; it passes with stable=False too)",
    ("train/trainer.py", "Trainer._setup", "self._stop, self._saved, self._callback = False, -1, None", "1 -> 2"):
        "`_saved` starts as a sentinel below every iteration (>= 0): -1 and -2 both differ from any iteration",
}

# (module, function, source line stripped) -> why every mutant of that line is equivalent (dead code).
EQUIVALENT_LINES: dict[tuple[str, str, str], str] = {
    **{("rl/chunking.py", "temporal", line): "dead code: for T >= 5 the largest-remainder rounding already gives "
       "every chunk at least one step (checked for every T up to 1000), so the lift of an empty chunk never runs"
       for line in ("largest = max(range(len(sizes)), key=lambda k: (sizes[k], k))", "sizes[largest] -= 1",
                    "sizes[j] = 1")},
}
