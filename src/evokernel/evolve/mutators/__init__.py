"""Mutators: how a parent program becomes a proposed child.

  base.py        the interface (Mutator, MutationContext, Proposal, BudgetExceeded)
  registry.py    build_mutators(...) -> MutatorSet, the run's mutators and the weighted choice
  offline.py     knob moves and known transformations, no endpoint (transforms.py)
  llm.py         LLM diff / rewrite / crossover prompts (diff.py parses and applies
                 SEARCH/REPLACE edits, extract.py reads rewrites)
  crossover.py   two parents: knob mix offline, or an LLM prompt
  config.py      OfflineConfig, PromptConfig

This package file imports nothing on purpose: `evolve.llm` imports `base`, and `registry`
imports `evolve.llm`.
"""
