"""The trainer core: agents, the cohort step, GRPO math, optimisation backends, checkpoints, ranks."""
