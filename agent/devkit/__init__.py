"""Development aids beside the policy contract, not part of it: what tests, the demo and the
benchmarks use where a real deployment has a 7B checkpoint and people.

- ``tiny_model``: a tiny Qwen2.5-VL built from config with a locally trained tokenizer, loaded by
  the same code as the real checkpoint (no model hub needed).
- ``expert_policy``: a policy that answers with the simulated tasks' expert actions (the demo's
  ``--policy expert``, the scripted person's corrections).
"""
