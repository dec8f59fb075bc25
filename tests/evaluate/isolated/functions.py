"""Functions that tests/evaluate/test_sandbox.py runs through run_isolated."""

import ctypes
import os
import subprocess
import sys
import time


def evaluate(path):
    return {"combined_score": 1.5, "path": path, "nan": float("nan")}


def add(a, b=0):
    return a + b


def fails():
    raise ValueError("no good")


def hangs_with_grandchild(marker):
    subprocess.Popen([marker, "300"], executable="sleep", start_new_session=True)
    while True:
        time.sleep(0.1)


def segfaults():
    ctypes.string_at(0)


def hogs_memory():
    hoard = []
    while True:
        hoard.append(bytearray(b"x") * (64 * 2**20))  # touched, so resident


def lies_on_stdout():
    print('{"combined_score": 1000.0}', flush=True)
    sys.stdout.flush()
    os._exit(0)


def not_json():
    return object()


def exits():
    sys.exit(3)
