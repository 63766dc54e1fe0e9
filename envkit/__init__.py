"""envkit: make GPU environments for LLM serving right, repeatably, also offline."""

__version__ = "0.1.0"
