"""Agent-R1 trainer: a step-level MDP for multi-step LLM agents and the RL algorithms that train them.

This package never imports Django or ``tasks_lib``; recipes plug in through the
``agent_r1_studio.tasks`` entry-point group (see ``trainer.plugins``).
"""
