"""Reading ai-dynamo/aiconfigurator's committed kernel tables from a checkout (or a bare mirror):
the helpers the scripts/import_aiconfigurator_*.py importers share."""

import io
import subprocess

import pyarrow.parquet as pq

DATA = "aic-core/src/aiconfigurator_core/systems/data"


def head_commit(repo):
    """The commit the checkout's HEAD names (40 hex digits), for the written file's header."""
    return subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def table(repo, path):
    """The rows (dicts) of the parquet file at `path` in the checkout's HEAD."""
    blob = subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True
    ).stdout
    return pq.read_table(io.BytesIO(blob)).to_pylist()
