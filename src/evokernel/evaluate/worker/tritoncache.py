"""Triton's cache as a worker sees it: its own directory first (TRITON_CACHE_DIR, read-write,
Triton's usual behaviour), then the shared directories named in EVOKERNEL_SHARED_CACHE, which
the sandbox lets it read but not write. Selected with TRITON_CACHE_MANAGER (see
process/compile_cache.py for who may put what where)."""

from __future__ import annotations

import json
import os

from triton.runtime.cache import FileCacheManager


class LayeredCache(FileCacheManager):
    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        super().__init__(key, override=override, dump=dump)
        roots = os.environ.get("EVOKERNEL_SHARED_CACHE", "").split(os.pathsep)
        self.shared = [] if override or dump else [os.path.join(r, key) for r in roots if r]

    def get_file(self, filename: str) -> str | None:
        found = super().get_file(filename)
        if found is not None:
            return found
        for directory in self.shared:
            path = os.path.join(directory, filename)
            if os.path.isfile(path):
                return path
        return None

    def get_group(self, filename: str) -> dict[str, str] | None:
        found = super().get_group(filename)
        if found is not None:
            return found
        for directory in self.shared:
            try:
                with open(os.path.join(directory, f"__grp__{filename}")) as f:
                    children = json.load(f)["child_paths"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            return {c: p for c, p in children.items() if os.path.isfile(p)}
        return None
