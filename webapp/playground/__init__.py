"""The playground: a checkpoint or an experiment's base model answering one prompt with the
experiment's tools, step by step, on a Celery worker (docs/playground.md)."""
