"""Who may run a kernel pack's programs: content hashes, this user's pack key, one flag.

A pack's programs are Python files, and `--kernels PACK_DIR` imports them into the process
that runs the engine (generate, verify, bench decode, serve) with that user's permissions:
using a pack means running its author's code. So:

  * pack.json records a content hash of every program it names (`hashes`: pack-relative path
    -> "sha256:<hex>"). A program whose bytes differ from its hash is refused, always.
  * `evokernel tune` signs those hashes with this user's pack key (`signature`: the scheme,
    the key's id and an HMAC-SHA256 of the hashes). A pack whose signature checks with this
    user's key came from this user's tune (or from someone holding the key) and is trusted.
  * Any other pack (unsigned, signed with another key, hashes edited after signing) is
    refused, unless the user passes `--trust-kernels` (as transformers' `trust_remote_code`):
    run this pack's programs although this user's tune did not write them.
  * Trusted or not, every program passes the evaluator's static check before it is imported
    (engine/packs/programs.py), and a pack whose tables name no program runs no code: it needs no
    trust at all.

The key: $EVOKERNEL_PACK_KEY (a file path), else $XDG_CONFIG_HOME/evokernel/pack-key, else
~/.config/evokernel/pack-key; 32 random bytes as hex, created by the first `tune` (mode 0600,
its directory 0700). A key file that is not a regular file owned by this user, or that others
may read or write, is refused in one line: whoever can read it can sign packs as this user.

    hashes = {name: content_hash(data), ...}
    signature = sign(hashes)                 # creates the key when there is none
    trust = decide(pack, allow_unsigned)     # SIGNED | FLAGGED | NO_CODE, or PackError
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evokernel.engine.packs.format import Pack, PackError

KEY_ENV = "EVOKERNEL_PACK_KEY"
FLAG = "--trust-kernels"
HASH_PREFIX = "sha256:"
SCHEME = "hmac-sha256"

# How a pack's programs came to be trusted (`Pack.trust`).
SIGNED = "signed"  # its signature checks with this user's key
FLAGGED = "flag"  # the user passed --trust-kernels
NO_CODE = "no-programs"  # its tables name no program: nothing of it runs

_KEY_BYTES = 32


def key_path() -> Path:
    """Where this user's pack key lives (see the module doc)."""
    given = os.environ.get(KEY_ENV)
    if given:
        return Path(given)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "evokernel" / "pack-key"


def content_hash(data: bytes) -> str:
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def is_content_hash(value: Any) -> bool:
    if not isinstance(value, str) or not value.startswith(HASH_PREFIX):
        return False
    digest = value[len(HASH_PREFIX) :]
    return len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


def sign(hashes: Mapping[str, str]) -> dict[str, str]:
    """The signature of `hashes` with this user's key (created when there is none)."""
    key = _read_key(create=True)
    assert key is not None
    return {"scheme": SCHEME, "key": key_id(key), "mac": _mac(key, hashes)}


def ensure_key() -> Path:
    """This user's key, created when absent; a PackError line when it is unusable. `tune`
    calls it before searching, so a bad key costs no search."""
    _read_key(create=True)
    return key_path()


def key_id(key: bytes) -> str:
    """A short public name of a key (pack.json records it; the key itself stays secret)."""
    return hashlib.sha256(b"evokernel pack key\0" + key).hexdigest()[:16]


def check_signature(hashes: Mapping[str, str], signature: Mapping[str, Any] | None) -> str:
    """Empty when `signature` signs `hashes` with this user's key; else why not, as words that
    follow "kernel pack DIR"."""
    if not signature:
        return "is not signed"
    if signature.get("scheme") != SCHEME:
        return f"is signed with an unknown scheme {str(signature.get('scheme'))[:40]!r}"
    key = _read_key(create=False)
    if key is None:
        return f"is signed, but this user has no pack key ({key_path()}) to check it with"
    if signature.get("key") != key_id(key):
        return (
            f"is signed with another key ({str(signature.get('key'))[:20]}), not this "
            f"user's ({key_id(key)})"
        )
    mac = signature.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, hashes)):
        return "has content hashes that do not match its signature (pack.json was edited)"
    return ""


def decide(pack: Pack, allow_unsigned: bool) -> str:
    """How `pack`'s programs may run: SIGNED, FLAGGED (`allow_unsigned`) or NO_CODE; else a
    PackError saying what running them would mean and which flag allows it."""
    if not pack.programs():
        return NO_CODE
    why = check_signature(pack.hashes, pack.signature)
    if not why:
        return SIGNED
    if allow_unsigned:
        return FLAGGED
    raise PackError(
        f"kernel pack {pack.path} {why}: it was not written by this user's evokernel tune, and "
        f"its programs are Python code that would run in this process with your permissions; "
        f"read them, then pass {FLAG} to run them anyway"
    )


def _mac(key: bytes, hashes: Mapping[str, str]) -> str:
    message = json.dumps({"hashes": dict(hashes)}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _read_key(create: bool) -> bytes | None:
    """This user's key; None when there is none and `create` is false."""
    path = key_path()
    try:
        # O_NONBLOCK: a FIFO put where the key belongs must not block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        return _create_key(path)
    except OSError as err:
        raise PackError(f"pack key {path}: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PackError(f"pack key {path} is not a regular file")
        if info.st_uid != os.getuid():
            raise PackError(f"pack key {path} belongs to another user (uid {info.st_uid})")
        if info.st_mode & 0o077:
            raise PackError(
                f"pack key {path} may be read or written by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): anyone who reads it can sign packs as you; "
                f"chmod 600 {path}"
            )
        text = f.read(4 * _KEY_BYTES).decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != _KEY_BYTES:
        raise PackError(
            f"pack key {path} is not {2 * _KEY_BYTES} hex digits; remove it and run "
            "evokernel tune to make a new one (packs signed with the old key then need "
            f"{FLAG}, or tune again)"
        )
    return key


def _create_key(path: Path) -> bytes:
    """A new key at `path`, published atomically without replacing one that appeared
    meanwhile (two tunes starting at once both end up with the same key)."""
    key = secrets.token_bytes(_KEY_BYTES)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(key.hex() + "\n")
            os.link(tmp, path)  # fails when a key is already there: keep that one
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except OSError as err:
        raise PackError(f"cannot create the pack key {path}: {err.strerror or err}") from None
    made = _read_key(create=False)
    assert made is not None
    return made


__all__ = [
    "FLAG",
    "FLAGGED",
    "KEY_ENV",
    "NO_CODE",
    "SIGNED",
    "check_signature",
    "content_hash",
    "decide",
    "ensure_key",
    "is_content_hash",
    "key_path",
    "sign",
]
