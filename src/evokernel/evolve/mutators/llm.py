"""LLM mutators: SEARCH/REPLACE diffs, full rewrites of the block, and crossover prompts.

One `LLMMutator` per mode ("diff", "rewrite", "crossover"), sharing a thread-safe
`ChatClient`. A proposal:

  1. draws the model from the ensemble by weight with `ctx.rng` (before anything blocks);
  2. builds the prompt (`evokernel.evolve.prompts`);
  3. asks the endpoint (`ChatClient.chat`; raises only `BudgetExceeded`);
  4. turns the answer into a program: diff mode applies the edits inside the EVOLVE-BLOCK (an
     answer with no edit but a full block is taken as a rewrite, kind "llm:rewrite"); rewrite
     and crossover modes extract the new block. An answer over `MAX_ANSWER_CHARS` is refused
     unread: a program must fit the evaluator's 256 KiB, and the parsers need not meet
     megabytes. Only its first `MAX_ANSWER_CHARS` characters are kept in the proposal (and so
     in the run directory); the response digest is of the whole answer.

Whatever goes wrong after step 3 comes back as `Proposal.error`, one line, with the model's
name; the prompt and response texts and their sha256 digests and the token usage are always
filled in once a request was sent. The code is not compiled here: the evaluator's static check
rejects a program that does not parse, with a reason the next prompt shows.
"""

from __future__ import annotations

from evokernel.evolve.llm.client import ChatClient, ChatReply
from evokernel.evolve.llm.config import ModelSpec, pick_model
from evokernel.evolve.mutators.diff import apply_edits, parse_edits
from evokernel.evolve.mutators.extract import change_line, extract_rewrite
from evokernel.evolve.prompts import MODES, PromptBuilder
from evokernel.evolve.types import MutationContext, ProgramView, Proposal

MAX_ANSWER_CHARS = 1 << 20


def _kept(text: str) -> str:
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return f"{text[:MAX_ANSWER_CHARS]}\n[{len(text) - MAX_ANSWER_CHARS} more characters not kept]"


class LLMMutator:
    def __init__(
        self,
        mode: str,
        client: ChatClient,
        models: list[ModelSpec] | None = None,
        builder: PromptBuilder | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown LLM mode {mode!r} (known: {MODES})")
        self.mode = mode
        self.name = f"llm_{mode}"
        self.client = client
        self.models = list(models if models is not None else client.config.models)
        self.builder = builder or PromptBuilder()

    def propose(self, ctx: MutationContext, other: ProgramView | None = None) -> Proposal:
        kind = f"llm:{self.mode}"
        parents = (ctx.parent.id,) + ((other.id,) if other is not None else ())
        if self.mode == "crossover" and other is None:
            return Proposal(
                None, kind, error="crossover needs a second program", parent_ids=parents
            )
        model = pick_model(self.models, ctx.rng)
        prompt = self.builder.build(ctx, self.mode, other)
        reply = self.client.chat(prompt.messages, model)
        out = Proposal(
            None,
            kind,
            parent_ids=parents,
            prompt_digest=reply.prompt_digest,
            response_digest=reply.response_digest,
            usage=[reply.usage],
            prompt=prompt.text,
            response=_kept(reply.text),
        )
        if reply.error:
            out.error = f"{model.name}: {reply.error}"
            return out
        code, kind, error = self._program(reply, ctx.parent.code)
        out.kind = kind
        if code is None:
            out.error = f"{model.name}: {error}"
            return out
        out.code = code
        out.description = change_line(reply.text) or f"{kind} by {model.name}"
        return out

    def _program(self, reply: ChatReply, parent: str) -> tuple[str | None, str, str]:
        """(code, kind, error) from the answer text."""
        kind = f"llm:{self.mode}"
        cut = " (the answer hit max_tokens)" if reply.finish_reason == "length" else ""
        if len(reply.text) > MAX_ANSWER_CHARS:
            size = f"the answer is {len(reply.text)} characters"
            return None, kind, f"{size}; the limit is {MAX_ANSWER_CHARS}"
        if self.mode == "diff":
            parsed = parse_edits(reply.text)
            if parsed.problems:
                return None, kind, parsed.problems[0] + cut
            if parsed.edits:
                applied = apply_edits(parent, parsed.edits)
                return applied.code, kind, applied.error + (cut if applied.error else "")
            rewrite = extract_rewrite(reply.text, parent)
            if rewrite.code is not None:
                return rewrite.code, "llm:rewrite", ""
            start = " ".join(reply.text.split())[:80]
            return None, kind, f"no SEARCH/REPLACE edit in the answer (it began {start!r}){cut}"
        rewrite = extract_rewrite(reply.text, parent)
        return rewrite.code, kind, rewrite.error + (cut if rewrite.error else "")
