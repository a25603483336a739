"""Training datasets out of the lake, each written with one discipline (WMO's `training_data`).

`wmo_lake.exports.discipline` is that discipline, once: the split guard and task registry, the
batches in scope, the settings in force, the manifest, the atomic never-overwrite write, and the
verified load. Each kind is a small module plugging into it, with its own query, writer, reader
and summary (import a kind when it is used: each pulls in its own libraries):

- `wmo_lake.exports.datums`: training datums (Parquet), `load_verified`, `to_tinker`;
- `wmo_lake.exports.conversations`: SFT conversations (JSONL or Parquet), `load_verified`.
"""
