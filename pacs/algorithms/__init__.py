"""The RL objectives as pure tensor functions, and one registry naming them.

A trainer looks an objective up by name (``objectives.get_objective``), builds its config from the run's
options, computes the batch tensors ``needs(config)`` lists once per step, calls ``prepare`` once per step and
``loss`` per micro-batch. Adding an objective means adding an entry to ``options.ALGORITHMS`` (its options,
without torch) and to ``objectives.OBJECTIVES`` (its tensor math); no training code changes.

Batch tensors: ``logprobs``, ``old_logprobs``, ``ref_logprobs``, ``entropy``, ``values``,
``new_values``, ``sampler_logprobs`` (the rollout engine's, for rollout correction) (B, T); ``response_mask``
(B, T); ``value_mask`` (B, T), the critic's states where they are not the response's (PPO); ``rewards`` (B,)
in {0, 1}; rows in groups of n.
"""
