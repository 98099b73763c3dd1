"""Gradient accumulation over micro-batches of transitions, exact for any objective (docs/methods.md "Micro-batches").

An objective couples the transitions of a minibatch (chunk ratios sum a trajectory's log-probs, token-mean losses
divide by the batch's count), so splitting its loss by rows would change it. Instead the chain rule is split:

    1. without gradient, re-score every transition in micro-batches: log_prob (N,), kl (N,)
    2. the objective on those values as leaves: loss, and dloss/dlog_prob, dloss/dkl (N,) by backward
    3. per micro-batch, re-score with gradient and backpropagate the stored dloss/d(log_prob, kl) into the weights

The weights' gradient equals the one-pass gradient (up to float rounding); peak activation memory is that of one
micro-batch, at the price of one more forward pass without gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Rescore = Callable[[slice], tuple[torch.Tensor, torch.Tensor | None]]  # rows -> log_prob (n,), kl (n,) or None


def backward_in_micro_batches(rescore: Rescore, objective: Callable, rows: int, micro: int | None,
                              scale: float = 1.0):
    """Backpropagate `scale * objective(log_prob, kl).loss` into the weights, `micro` transitions per pass.

    rescore(rows) re-scores the transitions `rows` (a slice of the N = rows of the minibatch) with gradient when
    gradients are enabled; objective(log_prob (N,), kl (N,) | None) returns the objective's output (with `.loss`).
    micro None (or >= N) is one pass. Returns the objective's output.
    """
    if micro is None or micro >= rows:
        log_prob, kl = rescore(slice(0, rows))
        out = objective(log_prob, kl)
        (out.loss * scale).backward()
        return out
    parts = [slice(start, min(start + micro, rows)) for start in range(0, rows, micro)]
    with torch.no_grad():
        values = [rescore(part) for part in parts]  # 1. every transition, no activations kept
    log_prob = torch.cat([v[0] for v in values]).requires_grad_()  # (N,) leaf
    kl = None if values[0][1] is None else torch.cat([v[1] for v in values]).requires_grad_()  # (N,) leaf
    out = objective(log_prob, kl)
    (out.loss * scale).backward()  # 2. dloss/dlog_prob and dloss/dkl, (N,) each
    for part in parts:  # 3. one micro-batch of activations at a time
        lp, kl_part = rescore(part)
        tensors, grads = [lp], [log_prob.grad[part]]
        if kl is not None:
            tensors.append(kl_part)
            grads.append(kl.grad[part])
        torch.autograd.backward(tensors, grads)
    return out
