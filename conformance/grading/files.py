"""Files every part of grading writes and reads: whole or not at all."""
import json
import os
from pathlib import Path


def write_atomic(path, text):
    """Write ``text`` to ``path`` whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(text if isinstance(text, bytes) else text.encode())
    os.replace(partial, path)


def read_json(path):
    """The JSON in ``path``, or None when it cannot be read or is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
