"""Training backends: ``torch`` (single process, the embedded default) and ``verl`` (Ray + vLLM on GPUs)."""
