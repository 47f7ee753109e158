"""corl-vl: Co-RL for vision-language models."""
__version__ = "0.1.0"
