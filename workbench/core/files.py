"""Files that survive a crash: atomic replacement, strict JSON, and reading JSON with a one-line error."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from workbench.core.errors import WorkbenchError

JSON_LIMIT = 16 * 2**20  # bytes of a JSON file read_json reads at most (configs and status files are a few KB)


def atomic_write(path: str | Path, data: bytes | str, within: str | Path | None = None) -> Path:
    """Write `data` to `path` through a temporary file in the same folder, fsync and `os.replace`: a crash
    leaves either the old file or the new one, never a torn one. The folders above `path` are made, except
    `within` and what holds it: a folder that must exist already (a run's), so that one removed meanwhile is not
    made again (the write fails instead)."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        if within is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            for folder in reversed(path.parent.relative_to(within).parents[:-1]):  # a/b -> a, a/b (not `within`)
                (Path(within) / folder).mkdir(exist_ok=True)
            if path.parent != Path(within):
                path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise WorkbenchError(f"cannot write {path}: {err.strerror or err}; choose a writable folder") from None
    return path


def clean_json(obj):
    """Make obj strict JSON: NaN / inf floats become None, tuples become lists (recursively)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def write_json(path: str | Path, obj, within: str | Path | None = None) -> Path:
    """`obj` as strict, indented JSON, written atomically (`within` as for `atomic_write`)."""
    return atomic_write(path, json.dumps(clean_json(obj), indent=2, allow_nan=False), within)


def read_json(path: str | Path) -> dict:
    """A JSON object from a file; missing, unreadable, malformed or not an object is a WorkbenchError."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            raise WorkbenchError(f"{path} is not a regular file (a folder or a device); give a JSON file")
        with open(path, "rb") as f:
            raw = f.read(JSON_LIMIT + 1)
        if len(raw) > JSON_LIMIT:
            raise WorkbenchError(f"{path} is larger than {JSON_LIMIT // 2**20} MB; a settings file is a few KB")
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise WorkbenchError(f"{path} does not exist") from None
    except RecursionError:
        raise WorkbenchError(f"cannot read {path}: its JSON is nested too deeply") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WorkbenchError(f"cannot read {path}: {str(err).splitlines()[0][:200]}") from None
    if not isinstance(data, dict):
        raise WorkbenchError(f"{path} does not hold a JSON object")
    return data
