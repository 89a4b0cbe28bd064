"""RL math for the step-level MDP: advantage estimators, policy/value losses and algorithm presets.

Everything here is a pure tensor function (tensors in, tensors out) registered in one registry per
kind: ``ESTIMATORS`` (:mod:`.advantages`), ``POLICY_LOSSES`` (:mod:`.losses`) and ``PRESETS``
(:mod:`.presets`). Import them from their modules: this package imports nothing, so the presets and
the registries' names (:mod:`.names`) are read without torch.
"""
