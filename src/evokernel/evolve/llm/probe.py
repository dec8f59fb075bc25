"""Whether the LLM endpoints of a run can be used, checked once when `evolve` starts.

    problems = probe(cfg.llm)       # one line per problem; [] when every endpoint answers

For every distinct endpoint of the models with weight > 0: its key variable (`api_key_env`)
must be set, and `GET {api_base}/models` must get an HTTP answer within `timeout_s` (any status:
a 401 or a 404 still proves the server is there; only a refused connection, a name that does
not resolve or a timeout count as unreachable). The probe sends no prompt and spends nothing.
`evolve` prints each problem as one warning line, or stops with it under `--strict`.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from evokernel.evolve.llm.config import LLMConfig

TIMEOUT_S = 5.0


def _reach(url: str, key: str, timeout_s: float) -> str:
    """ "" when `url` answers over HTTP, else why not."""
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return ""
    except urllib.error.HTTPError:
        return ""  # an answer, whatever its status
    except urllib.error.URLError as err:
        return str(err.reason)
    except (TimeoutError, OSError) as err:
        return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def probe(llm: LLMConfig, timeout_s: float = TIMEOUT_S) -> list[str]:
    """One line per problem of the configured endpoints (see the module docstring)."""
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for model in llm.models:
        if model.weight <= 0:
            continue
        base = (model.api_base or llm.api_base).rstrip("/")
        var = model.api_key_env or llm.api_key_env
        if (base, var) in seen:
            continue
        seen.add((base, var))
        key = os.environ.get(var, "") if var else ""
        if var and not key:
            problems.append(
                f"llm: ${var} is not set: requests to {base} go without an API key "
                f"(llm.api_key_env names the variable)"
            )
        why = _reach(base + "/models", key, timeout_s)
        if why:
            problems.append(
                f"llm: {base} cannot be reached ({' '.join(why.split())[:160]}): LLM proposals "
                f"will fail (--offline runs the built-in mutator only)"
            )
    return problems
