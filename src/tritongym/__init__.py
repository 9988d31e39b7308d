"""tritongym: a trustworthy evaluator, environment and RL library for LLM-written Triton kernels."""

__version__ = "0.1.0"
