"""`Stop`: the control-flow signal that ends one candidate's evaluation early.

Raised by the phases of an evaluation (`session.py`'s load and correctness, `timed.py`'s
timing) once the reason is recorded in the result; `session.CandidateRun` catches it and
returns the result as it stands. It lives apart from both so that neither imports the other.
"""

from __future__ import annotations


class Stop(Exception):
    """End the evaluation now (the reason is already recorded)."""
