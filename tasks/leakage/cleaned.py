"""The cleaned shards ``<data>/leakage/<source>.parquet``: each split shard's rows with ``leak_flag``, removed
rows dropped, written straight from ``<data>/split/<source>.parquet`` in blocks of ``BLOCK_ROWS`` rows.

The audit decides which rows go (``removed``) and which are flagged (``flagged``, doc ids); ``clean_shard``
streams one shard through those two sets, one block of rows at a time, so no process ever holds a whole shard
and the driver holds only the ids. ``engine: local`` runs it for each shard in the stage's process,
``engine: ray`` in one Ray task per shard (``scan.ray_engine.clean_on_ray``): the same function on the same
files, so the same bytes. Every column of the split shard is kept as Arrow wrote it, in its order, and
``leak_flag`` (bool) is appended, also to the schema's pandas metadata, so ``pd.read_parquet`` gives the frame
the split shard gives plus the bool column. Each block that keeps a row is one Parquet row group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Rows read, filtered and written at once (one row group): about 130 MB of text at 2 KB a doc.
BLOCK_ROWS = 65_536
FLAG = "leak_flag"


def clean_shard(split_file: Path, out_file: Path, removed: Iterable[str], flagged: Iterable[str]) -> int:
    """Write ``out_file``: the rows of ``split_file`` whose ``doc_id`` is not in ``removed``, with ``leak_flag``
    true where it is in ``flagged``; returns the rows written. Raises ``ValueError`` naming the file when it has
    no ``doc_id`` column."""
    shard = pq.ParquetFile(split_file)
    schema = shard.schema_arrow
    if "doc_id" not in schema.names:
        raise ValueError(f"{split_file}: missing column(s) ['doc_id']")
    id_type = schema.field("doc_id").type
    gone, marked = (pa.array(sorted(ids), type=id_type) for ids in (removed, flagged))
    written = 0
    with pq.ParquetWriter(out_file, _flagged_schema(schema)) as writer:
        for block in shard.iter_batches(batch_size=BLOCK_ROWS):
            kept = block.filter(pc.invert(pc.is_in(block.column("doc_id"), value_set=gone)))
            if kept.num_rows:
                flag = pc.is_in(kept.column("doc_id"), value_set=marked)
                writer.write_table(pa.Table.from_batches([kept]).append_column(FLAG, flag))
                written += kept.num_rows
    return written


def _flagged_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` + a bool ``leak_flag`` field, entered in its pandas metadata (if any) as pandas enters a bool
    column, and with no index columns (the split shard's index, if any, does not survive the removals)."""
    metadata = dict(schema.metadata or {})
    if b"pandas" in metadata:
        pandas = json.loads(metadata[b"pandas"])
        entry = {"name": FLAG, "field_name": FLAG, "pandas_type": "bool", "numpy_type": "bool", "metadata": None}
        kept = [c for c in pandas["columns"] if c["field_name"] in schema.names]
        pandas.update(index_columns=[], columns=kept + [entry])
        metadata[b"pandas"] = json.dumps(pandas).encode()
    return schema.append(pa.field(FLAG, pa.bool_())).with_metadata(metadata)
