#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into seeds/<target>/ (run from
anywhere; the files are committed, this documents how they were made)."""
import json, os
here = os.path.dirname(os.path.abspath(__file__))

def put(target, name, data):
    d = os.path.join(here, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def line(obj):
    return json.dumps(obj, separators=(",", ":"))

T = "control_request"
pair = lambda s, d, n: {"src": s, "dst": d, "blocks": n}
span = lambda l, n: {"lba": l, "blocks": n}
put(T, "ping", line({"id": 1, "op": "ping"}))
put(T, "stats", line({"id": "s", "op": "stats"}))
put(T, "attrs", line({"id": 2, "op": "attrs", "from": 10, "max": 100}))
put(T, "clone", line({"id": 3, "op": "clone", "ranges": [pair(0, 100, 8), pair(8, 200, 8)]}))
put(T, "move", line({"id": 4, "op": "move", "ranges": [pair(5000, 0, 64)]}))
put(T, "delete", line({"id": 5, "op": "delete", "ranges": [span(0, 64), span(128, 64)]}))
put(T, "merge", line({"id": 6, "op": "merge", "sources": [1000, 2000], "dst": 0, "blocks": 256, "policy": "last-wins"}))
put(T, "attr", line({"id": 7, "op": "attr", "attribute": "non-persistent", "ranges": [span(7, 3)]}))
put(T, "vector", line({"id": "tx-9", "op": "vector", "ops": [
    {"op": "move", "ranges": [pair(100, 0, 4)]},
    {"op": "delete", "ranges": [span(200, 1)]},
    {"op": "attr", "attribute": "immutable", "ranges": [span(0, 4)]},
    {"op": "merge", "sources": [8], "dst": 16, "blocks": 1, "policy": "fail"}]}))
put(T, "overflow", line({"id": 10, "op": "clone", "ranges": [pair(18446744073709551615, 0, 18446744073709551615)]}))
put(T, "unknown_op", line({"id": 11, "op": "snapshot"}))
put(T, "wrong_type", '{"id":12,"op":"delete","ranges":[{"lba":"0","blocks":1.5}]}')
put(T, "not_json", "clone 0:100:8\r")
put(T, "snapshot_create", line({"id": 13, "op": "snapshot_create", "name": "before-upgrade"}))
put(T, "snapshot_delete", line({"id": 14, "op": "snapshot_delete", "name": "n\u00e9\n\"x"}))
put(T, "snapshots", line({"id": 15, "op": "snapshots"}))
put(T, "snapshot_read", line({"id": 16, "op": "snapshot_read", "name": "a", "lba": 0, "blocks": 256}))
