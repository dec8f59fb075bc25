"""Mutators: how a parent program becomes a proposed child.

The interface (Mutator, MutationContext, Proposal, BudgetExceeded) is `evolve/types.py`,
shared with the controller, the database and the LLM client.

  registry.py    build_mutators(...) -> MutatorSet, the run's mutators and the weighted choice
                 (NAMES, the mutator names of `mutators.weights`, live in `evolve/config.py`)
  offline.py     knob moves and known transformations, no endpoint (transforms.py,
                 knob_model.py)
  llm.py         LLM diff / rewrite / crossover prompts (diff.py parses and applies
                 SEARCH/REPLACE edits, extract.py reads rewrites)
  crossover.py   two parents: knob mix offline, or an LLM prompt
  config.py      OfflineConfig, PromptConfig

This package file imports nothing, so `mutators.config` loads without the LLM client.
"""
