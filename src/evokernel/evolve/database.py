"""The durable program database: one SQLite file in the run directory (WAL journal).

Every iteration of the search leaves exactly one row in `programs` (its `iteration` >= 0),
whatever happened: an evaluated program (`status` "ok" or "failed"), a correct program the
evaluator's cascade screened out ("screened": evaluated, never a parent or an elite), a
proposal that produced no program or broke the EVOLVE-BLOCK rule ("rejected"), or a program
whose code the island already holds ("duplicate", not a member of the population). Seeds
(iteration -1) and migrants (copies of another island's elites, `migrant` = 1) are rows too;
they, and programs whose code was already evaluated elsewhere, carry `reused_from` = the id
whose evaluation they reuse, so no code is evaluated twice.

Each commit is one transaction holding the new rows and the run-state updates in `meta`, so a
process killed at any moment leaves either all of an iteration or none of it. There is no
mutable random state to save: every random draw derives from (seed, iteration) (see
`controller.py`), and the iteration counter is the set of iterations present.

Rows are never updated or deleted. The whole table except the `result` column (the full
`EvalResult` JSON, fetched on demand) is mirrored in memory in commit order.

Opening: `Database.create(path)` writes the schema into a new file; `Database(path)` opens an
existing run database and first checks, read-only, that it is one (tables, columns, a run
definition), so a garbage, truncated or empty file is a one-line error and is never written.
Schema version 1; columns added since, with their default for older files (added on the first
read-write open, assumed on a read-only one): `evaluated_on` (JSON: the backend, worker or
node and GPU that ran the evaluation, attempts, infrastructure faults).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.evaluate.result import EvalResult
from evokernel.evolve.types import ProgramView, Usage

SCHEMA_VERSION = 1
MEMBER_STATUSES = ("ok", "failed")  # part of their island's population
EVALUATED_STATUSES = ("ok", "failed", "screened")  # carry an evaluation (own or reused)
CORRECT_STATUSES = ("ok", "screened")
# Columns added after version 1, with the default older files get (name -> SQL type clause).
_ADDED = {"evaluated_on": "TEXT NOT NULL DEFAULT '{}'"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (
    id TEXT PRIMARY KEY,
    iteration INTEGER NOT NULL,
    island INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    parent_ids TEXT NOT NULL,
    kind TEXT NOT NULL,
    description TEXT NOT NULL,
    status TEXT NOT NULL,
    code TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    reused_from TEXT NOT NULL,
    migrant INTEGER NOT NULL,
    fitness REAL,
    features TEXT NOT NULL,
    cell TEXT NOT NULL,
    regimes TEXT NOT NULL,
    reasons TEXT NOT NULL,
    insight TEXT NOT NULL,
    prompt_digest TEXT NOT NULL,
    response_digest TEXT NOT NULL,
    usage TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    eval_wall_s REAL NOT NULL,
    visible_at INTEGER NOT NULL,
    created_at REAL NOT NULL,
    committed_at REAL NOT NULL,
    result TEXT,
    evaluated_on TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS programs_hash ON programs (code_hash);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_JSON_FIELDS = ("parent_ids", "features", "cell", "regimes", "reasons", "usage", "evaluated_on")


@dataclass
class Program:
    """One row of `programs` (without the result JSON)."""

    id: str
    iteration: int  # -1 for seeds
    island: int
    generation: int
    parent_ids: tuple[str, ...]
    kind: str  # mutation kind: "seed", "migrant", "offline:knob", "llm:diff", ...
    description: str
    status: str  # ok | failed | screened | rejected | duplicate
    code: str
    code_hash: str  # types.code_digest of the code ("" when there is none)
    visible_at: int  # the first iteration whose proposal may see this row
    reused_from: str = ""
    migrant: bool = False
    fitness: float | None = None
    features: dict[str, Any] = field(default_factory=dict)
    cell: tuple[int, ...] = ()
    regimes: dict[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    insight: str = ""
    prompt_digest: str = ""
    response_digest: str = ""
    usage: tuple[Usage, ...] = ()
    tokens: int = 0
    cost_usd: float = 0.0
    eval_wall_s: float = 0.0
    created_at: float = 0.0
    committed_at: float = 0.0
    # Where the evaluation ran: backend, worker or node, GPU, attempts, faults (see backends/).
    evaluated_on: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        """Every correctness check passed (fully evaluated, or screened)."""
        return self.status in CORRECT_STATUSES

    @property
    def member(self) -> bool:
        """Part of its island's population (candidate parent or failed attempt)."""
        return self.status in MEMBER_STATUSES

    @property
    def evaluated(self) -> bool:
        """Carries an evaluation, its own or one it reuses."""
        return self.status in EVALUATED_STATUSES

    @property
    def evaluated_here(self) -> bool:
        """This row's code was evaluated for this row (not reused from another)."""
        return self.evaluated and not self.reused_from

    @property
    def reused(self) -> bool:
        """An iteration's program that repeated code evaluated before and took its result
        (a duplicate on its own island is counted apart)."""
        return (
            self.iteration >= 0 and not self.migrant and self.evaluated and bool(self.reused_from)
        )

    def view(self, result: EvalResult | None = None) -> ProgramView:
        return ProgramView(
            id=self.id,
            code=self.code,
            fitness=self.fitness,
            correct=self.correct,
            island=self.island,
            generation=self.generation,
            mutation=self.kind,
            parent_ids=self.parent_ids,
            result=result,
        )


def _encode(p: Program, result_json: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: getattr(p, f.name) for f in fields(Program)}
    row["usage"] = [u.__dict__ for u in p.usage]
    for name in _JSON_FIELDS:
        row[name] = json.dumps(list(row[name]) if isinstance(row[name], tuple) else row[name])
    row["migrant"] = int(p.migrant)
    row["result"] = result_json
    return row


def _decode(row: sqlite3.Row) -> Program:
    d = {f.name: row[f.name] for f in fields(Program)}
    for name in _JSON_FIELDS:
        d[name] = json.loads(d[name])
    d["parent_ids"] = tuple(d["parent_ids"])
    d["cell"] = tuple(d["cell"])
    d["reasons"] = tuple(d["reasons"])
    d["usage"] = tuple(Usage(**u) for u in d["usage"])
    d["migrant"] = bool(d["migrant"])
    return Program(**d)


class NotARunDatabase(EvokernelError):
    """The file is not a run's program database (garbage, truncated, empty, another schema)."""


def _check_run_database(path: Path) -> set[str]:
    """Read-only checks that `path` holds a run database; returns the columns of `programs`."""
    if not path.exists():
        raise EvokernelError(f"no program database at {path}")
    if not path.is_file():
        raise NotARunDatabase(f"{path} is not a file")
    if path.stat().st_size == 0:
        raise NotARunDatabase(f"{path} is empty: not a run database (start a new run)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if not {"programs", "meta"} <= tables:
                raise NotARunDatabase(f"{path} is not a run database (no programs/meta tables)")
            columns = {r[1] for r in conn.execute("PRAGMA table_info(programs)")}
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            # Every page readable: a truncated file fails here, before anything writes to it.
            problem = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise NotARunDatabase(f"{path} is not a readable run database ({err})") from None
    if problem != "ok":
        raise NotARunDatabase(f"{path} is damaged ({problem})")
    missing = {f.name for f in fields(Program)} - columns - set(_ADDED)
    if missing:
        raise NotARunDatabase(f"{path} is not a run database (no column {sorted(missing)[0]})")
    if version is None:
        raise NotARunDatabase(f"{path} holds no run definition (the run never started)")
    return columns


class Database:
    """The run's SQLite database. Writes come from one thread (the controller's).

    `Database(path)` opens an existing run database (checked first, see the module doc);
    `Database.create(path)` makes a new one."""

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool = False,
        synchronous: str = "normal",
        _create: bool = False,
    ):
        self.path = Path(path)
        self.readonly = readonly
        columns = set() if _create else _check_run_database(self.path)
        try:
            if readonly:
                uri = f"file:{self.path}?mode=ro"
                self.conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            else:
                self.conn = sqlite3.connect(str(self.path), isolation_level=None)
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
                if _create:
                    self.conn.executescript(_SCHEMA)
                    columns = {f.name for f in fields(Program)}
                for name, clause in _ADDED.items():
                    if name not in columns:  # migration: additive, defaults for old rows
                        self.conn.execute(f"ALTER TABLE programs ADD COLUMN {name} {clause}")
                        columns.add(name)
            self.conn.row_factory = sqlite3.Row
            self._load(columns)
        except sqlite3.Error as err:
            raise NotARunDatabase(f"{self.path}: cannot read the run database ({err})") from None
        version = self._meta.get("schema_version")
        if version is not None and version != SCHEMA_VERSION:
            raise EvokernelError(f"{self.path}: schema version {version}, need {SCHEMA_VERSION}")

    @classmethod
    def create(cls, path: Path, synchronous: str = "normal") -> Database:
        """A new, empty run database at `path` (which must not exist yet)."""
        if Path(path).exists():
            raise EvokernelError(f"{path} already exists")
        return cls(path, synchronous=synchronous, _create=True)

    def _load(self, columns: set[str]) -> None:
        names = [f.name for f in fields(Program)]
        cols = ", ".join(
            n if n in columns else f"{_ADDED[n].split('DEFAULT ')[1]} AS {n}" for n in names
        )
        try:
            rows = self.conn.execute(f"SELECT {cols} FROM programs ORDER BY rowid")
            self._programs = [_decode(r) for r in rows]
            meta = self.conn.execute("SELECT key, value FROM meta")
            self._meta = {r["key"]: json.loads(r["value"]) for r in meta}
        except (ValueError, TypeError, KeyError) as err:  # JSON or field trouble in a row
            raise NotARunDatabase(f"{self.path}: a damaged row ({err})") from None
        self._by_id = {p.id: p for p in self._programs}

    # --- reading ---------------------------------------------------------------------------
    @property
    def programs(self) -> list[Program]:
        """Every row, in commit order."""
        return self._programs

    def get(self, program_id: str) -> Program:
        return self._by_id[program_id]

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._by_id

    def result(self, program_id: str) -> EvalResult | None:
        """The stored EvalResult of a row (following `reused_from`)."""
        p = self._by_id[program_id]
        source = p.reused_from or p.id
        try:
            row = self.conn.execute(
                "SELECT result FROM programs WHERE id = ?", (source,)
            ).fetchone()
            if row is None or row["result"] is None:
                return None
            return EvalResult.from_json(row["result"])
        except (sqlite3.Error, ValueError, TypeError, KeyError) as err:
            raise NotARunDatabase(
                f"{self.path}: the result of {source} is damaged ({err})"
            ) from None

    def meta(self, key: str, default: Any = None) -> Any:
        return self._meta.get(key, default)

    # --- writing ---------------------------------------------------------------------------
    def commit(
        self,
        rows: Sequence[tuple[Program, str | None]] = (),
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Insert `rows` (program, result JSON) and update `meta` in one transaction."""
        if self.readonly:
            raise RuntimeError("database opened read-only")
        now = time.time()
        for p, _ in rows:
            p.committed_at = now
            if not p.created_at:
                p.created_at = now
        encoded = [_encode(p, result_json) for p, result_json in rows]
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                for row in encoded:
                    names = ", ".join(row)
                    marks = ", ".join(f":{k}" for k in row)
                    self.conn.execute(f"INSERT INTO programs ({names}) VALUES ({marks})", row)
                for key, value in (meta or {}).items():
                    self.conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                        (key, json.dumps(value, sort_keys=True)),
                    )
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as err:
            raise EvokernelError(f"cannot write the run database {self.path}: {err}") from None
        for p, _ in rows:
            self._programs.append(p)
            self._by_id[p.id] = p
        self._meta.update(meta or {})

    def close(self) -> None:
        self.conn.close()
