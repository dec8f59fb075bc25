"""The mutators of a run, built from the config, and the weighted choice among them.

    mset = build_mutators(weights, llm_config, offline_config, prompt_config, accounting)
    mutator = mset.choose(rng)          # one rng.random() draw
    proposal = mutator.propose(ctx)     # may raise BudgetExceeded (LLM mutators only)

Names in `weights` (the core's `mutators.weights`):
  offline      OfflineMutator (knobs and transformations)
  llm_diff     LLMMutator("diff")
  llm_rewrite  LLMMutator("rewrite")
  crossover    Crossover: an LLM prompt with both parents when an LLM is configured and the
               parents differ beyond knob values, else a mix of their knob values

A weight that asks for an LLM mutator while no model is configured is a `ConfigError`. All LLM
mutators share one `ChatClient` (one concurrency limit) and the run's `Accounting`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evokernel.errors import ConfigError
from evokernel.evolve.config import MUTATOR_NAMES as NAMES
from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.llm.client import ChatClient
from evokernel.evolve.llm.config import LLMConfig
from evokernel.evolve.mutators.config import OfflineConfig, PromptConfig
from evokernel.evolve.mutators.crossover import Crossover
from evokernel.evolve.mutators.llm import LLMMutator
from evokernel.evolve.mutators.offline import OfflineMutator
from evokernel.evolve.prompts import PromptBuilder
from evokernel.evolve.types import Mutator


@dataclass
class MutatorSet:
    mutators: dict[str, Mutator]
    weights: dict[str, float]
    client: ChatClient | None  # None: no LLM configured
    accounting: Accounting

    def choose(self, rng: random.Random) -> Mutator:
        names = [n for n in NAMES if self.weights.get(n, 0) > 0]
        x = rng.random() * sum(self.weights[n] for n in names)
        for n in names:
            x -= self.weights[n]
            if x < 0:
                return self.mutators[n]
        return self.mutators[names[-1]]


def build_mutators(
    weights: dict[str, float],
    llm: LLMConfig | None = None,
    offline: OfflineConfig | None = None,
    prompt: PromptConfig | None = None,
    accounting: Accounting | None = None,
    client: ChatClient | None = None,
) -> MutatorSet:
    unknown = sorted(set(weights) - set(NAMES))
    if unknown:
        raise ConfigError(f"mutators.weights: unknown mutator {unknown[0]!r} (known: {NAMES})")
    if not any(w > 0 for w in weights.values()):
        raise ConfigError("mutators.weights: at least one weight must be > 0")
    accounting = accounting or (client.accounting if client else Accounting())
    if client is None and llm is not None and llm.enabled:
        client = ChatClient(llm, accounting)
    for name in ("llm_diff", "llm_rewrite"):
        if weights.get(name, 0) > 0 and client is None:
            raise ConfigError(f"mutators.weights.{name} > 0 needs llm.models (none configured)")
    builder = PromptBuilder(prompt)
    mutators: dict[str, Mutator] = {"offline": OfflineMutator(offline)}
    crossover_llm = None
    if client is not None:
        mutators["llm_diff"] = LLMMutator("diff", client, builder=builder)
        mutators["llm_rewrite"] = LLMMutator("rewrite", client, builder=builder)
        crossover_llm = LLMMutator("crossover", client, builder=builder)
    mutators["crossover"] = Crossover(crossover_llm)
    return MutatorSet(mutators, dict(weights), client, accounting)
