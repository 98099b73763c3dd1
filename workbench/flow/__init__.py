"""Flow-matching sampling: schedules, the SDE step with log-probs, the policy interface, trajectories, dynamics."""
