"""Programmatic dependent launch, shared by the decode kernels.

`pdl_enter(PDL)`: let the next kernel in the stream launch (griddepcontrol.launch_dependents),
then wait until the previous kernel has finished and its writes are visible
(griddepcontrol.wait). Everything a kernel does before this call may only read data no
earlier kernel of the step writes (weights, the KV cache of earlier steps); everything after
it is ordered as in a plain launch. A no-op when PDL is False (and under the interpreter).
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
