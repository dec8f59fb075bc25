"""`python -m evokernel.evaluate.process.probe CONFINEMENT_JSON`: enter the sandbox and print
the labels of the layers that hold, as one JSON list (policy.isolation_status reads it)."""

from __future__ import annotations

import json
import sys

from evokernel.evaluate.process.confine import Confinement, enter

if __name__ == "__main__":
    print(json.dumps(enter(Confinement.from_json(sys.argv[1]))), flush=True)
