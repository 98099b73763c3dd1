"""CPU time of fitting the PPO critic (workbench/rl/critic.py) with channels-last convolutions, as it runs, against
the plain channels-first layout it ran in before: the same fit (N random states of the embedded model's latent
shape, EPOCHS passes) alternated ROUNDS times in one process; prints both medians and every round.

    .venv/bin/python scripts/bench_critic.py [--threads 1] [--states 128] [--epochs 60] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workbench.rl.critic import ValueNet, fit, sigma_embedding


class ChannelsFirst(ValueNet):
    """The critic before: contiguous (NCHW) weights and inputs."""

    def __init__(self, *args):
        super().__init__(*args)
        self.latent.to(memory_format=torch.contiguous_format)

    def forward(self, x, sigma, text):
        h = self.latent(x.float()) + self.time(sigma_embedding(sigma, self.time_dim)) + self.text(text.float())
        return self.head(h).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--states", type=int, default=128, help="G x T states (8 x 16 at the app's defaults)")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    n = args.states
    x, sigma = torch.randn(n, 3, 32, 32, generator=gen), torch.rand(n, generator=gen)
    text, target = torch.randn(n, 64, generator=gen), torch.randn(n, generator=gen)
    seconds, losses = {"channels-first": [], "channels-last": []}, {}
    for _ in range(args.rounds):
        for name, cls in (("channels-first", ChannelsFirst), ("channels-last", ValueNet)):
            torch.manual_seed(0)
            critic = cls(3, 64)
            optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
            start = time.process_time()
            losses[name] = fit(critic, optimizer, x, sigma, text, target, args.epochs, 256,
                               torch.Generator().manual_seed(0))
            seconds[name].append(time.process_time() - start)
    for name, values in seconds.items():
        print(f"{name:15s} median {statistics.median(values):.2f} s of CPU ({', '.join(f'{v:.2f}' for v in values)}); "
              f"mean loss {losses[name]:.8f}")
    print(f"{args.states} states, {args.epochs} passes, {args.threads} thread(s), {args.rounds} alternating rounds")


if __name__ == "__main__":
    main()
