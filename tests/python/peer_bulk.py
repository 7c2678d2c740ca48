#!/usr/bin/env python3
"""The benchmark's peer loader: the official Python `elasticsearch` client's
`helpers.streaming_bulk` sending a file of bulk operations (NDJSON action/source pairs, as
scanstore-bench writes them) to an ES endpoint with the given chunking.

Usage: peer_bulk.py URL FILE [--chunk-size N] [--max-chunk-bytes B]
The file is read and turned into action dicts before the clock starts; only the load is
timed. Prints one JSON line: {"ops": n, "errors": n, "seconds": s, "client": version}.
Exits 2 if the client is missing.
"""
import argparse
import json
import os
import sys
import time

try:
    import elasticsearch
    from elasticsearch import Elasticsearch, helpers
except ImportError as exc:  # pragma: no cover - reported to the Rust tool
    print(f"elasticsearch package missing: {exc}", file=sys.stderr)
    sys.exit(2)


def actions(path):
    out = []
    with open(path, "rb") as f:
        lines = iter(f)
        for action_line in lines:
            (op, meta), = json.loads(action_line).items()
            source = json.loads(next(lines)) if op != "delete" else {}
            # Every action-line field (_index, _id, retry_on_conflict …) stays metadata.
            action = {"_op_type": op, **meta}
            if op in ("index", "create"):
                action["_source"] = source
            else:
                action.update(source)
            out.append(action)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("file")
    p.add_argument("--chunk-size", type=int, default=500)
    p.add_argument("--max-chunk-bytes", type=int, default=100 * 1024 * 1024)
    a = p.parse_args()
    # A secured cluster: the API key and the CA to verify an https:// URL against.
    es = Elasticsearch(
        a.url,
        request_timeout=300,
        api_key=os.environ.get("ES_API_KEY") or None,
        ca_certs=os.environ.get("ES_CA_FILE") or None,
    )
    todo = actions(a.file)
    ok = errors = 0
    started = time.perf_counter()
    for success, _item in helpers.streaming_bulk(
        es, todo, chunk_size=a.chunk_size, max_chunk_bytes=a.max_chunk_bytes,
        raise_on_error=False, raise_on_exception=True,
    ):
        if success:
            ok += 1
        else:
            errors += 1
    seconds = time.perf_counter() - started
    print(json.dumps({"ops": ok + errors, "errors": errors, "seconds": seconds,
                      "client": elasticsearch.__versionstr__}))


if __name__ == "__main__":
    main()
