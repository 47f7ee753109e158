"""Research tools around the trainer: the toy experiment, warm starts, held-out skills, theory, diagnostics."""
