"""Hostile (decode_linear): returns its input x [M, K] instead of y [M, N]. Expected:
output-shape (mismatch where N == K)."""


# EVOLVE-BLOCK-START
def _project(x, weight):
    return x


# EVOLVE-BLOCK-END


def linear(x, weight):
    return _project(x, weight)
