"""Prompt templates (package-data .txt files) and the builder that fills them; see builder.py."""

from evokernel.evolve.prompts.builder import MODES, Prompt, PromptBuilder, clip, figures

__all__ = ["MODES", "Prompt", "PromptBuilder", "clip", "figures"]
