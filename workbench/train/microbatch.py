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



def backward_shared(rescore: Rescore, objective: Callable, order: torch.Tensor, shares: list[int], dist,
                    micro: int | None, scale: float, context: Callable, sync: bool):
    """One minibatch shared by processes (`train/update.py`): this process re-scores its `shares[dist.rank]`
    transitions, every process evaluates `objective` on all N of them (gathered; order (N,) gives the minibatch
    position of each gathered value, the shares concatenated in rank order) and backpropagates `scale` x its own
    share of dloss/d(log_prob, kl) into the weights, at most `micro` transitions per pass.

    context(synced) is the context of a pass with gradient (DDP's no_sync when not synced). With `sync` the last pass
    averages the processes' gradients, and a process with no transition runs an idle pass (rescore(0:1) times 0) so
    that all take part. With `dist.lockstep` (FSDP: every forward gathers the weights, every backward reduces the
    gradients) every pass syncs and every process runs as many passes as the busiest one, idle ones included.
    Every process issues its collectives in the same order. Returns the objective's output (the same everywhere).
    """
    n, lockstep = shares[dist.rank], getattr(dist, "lockstep", False)
    passes = [0 if k == 0 else 1 if micro is None else -(-k // micro) for k in shares]
    mine = order[sum(shares[:dist.rank]):][:n]  # the minibatch positions of this process's values
    back = order.argsort()

    def exchange(lp: torch.Tensor | None, kl: torch.Tensor | None):
        """The objective on everyone's values as leaves, backpropagated to them: (output, dloss/dlp, dloss/dkl)."""
        got = dist.gather((None if lp is None else lp.detach().cpu(), None if kl is None else kl.detach().cpu()))
        leaves = []
        for k in (0, 1):
            values = [g[k] for g in got if g[k] is not None]
            leaves.append(torch.cat(values).to(order.device)[back].requires_grad_() if values else None)
        out = objective(*leaves)
        out.loss.backward()  # (N,) gradients at the leaves
        return out, *(None if leaf is None else leaf.grad[mine] * scale for leaf in leaves)

    def push(lp: torch.Tensor, kl: torch.Tensor | None, g_lp: torch.Tensor, g_kl, rows: slice) -> None:
        torch.autograd.backward([lp] + ([kl] if kl is not None else []),
                                [g_lp[rows]] + ([g_kl[rows]] if kl is not None else []))

    def idle() -> tuple[torch.Tensor, torch.Tensor | None]:  # a pass that moves no gradient, for the collectives
        lp, kl = rescore(slice(0, 1))
        return lp * 0, None if kl is None else kl * 0

    if max(passes) <= 1:  # every share in one pass: its graph kept across the exchange (no extra forward)
        synced = sync or lockstep
        with context(synced):
            lp, kl = rescore(slice(0, n)) if n else idle() if synced else (None, None)
            out, g_lp, g_kl = exchange(lp if n else None, kl if n else None)
            if n:
                push(lp, kl, g_lp, g_kl, slice(0, n))
            elif synced:
                torch.autograd.backward([lp.sum() + (kl.sum() if kl is not None else 0)])
        return out
    parts = [slice(start, min(start + micro, n)) for start in range(0, n, micro)]
    with torch.no_grad():  # 1. the values, no activations kept (lockstep: as many forwards as the busiest)
        values = [rescore(part) for part in parts]
        for _ in range(len(parts), max(passes) if lockstep else 0):
            rescore(slice(0, 1))
    lp = torch.cat([v[0] for v in values]) if values else None
    kl = torch.cat([v[1] for v in values]) if values and values[0][1] is not None else None
    out, g_lp, g_kl = exchange(lp, kl)  # 2. the objective's gradient at the values
    count = max(passes) if lockstep else len(parts) + int(sync and not parts)
    for i in range(count):  # 3. one pass of activations at a time; the last (or, lockstep, each) syncs
        with context(lockstep or (sync and i == count - 1)):
            if i < len(parts):
                lp_part, kl_part = rescore(parts[i])
                push(lp_part, kl_part, g_lp, g_kl, slice(parts[i].start, parts[i].stop))
            else:
                lp_idle, kl_idle = idle()
                torch.autograd.backward([lp_idle.sum() + (kl_idle.sum() if kl_idle is not None else 0)])
    return out
