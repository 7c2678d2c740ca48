#!/usr/bin/env python3
"""What an explicit `_refresh` of the same number of pending writes costs in a big index and
in a small one (the emulator's README, Performance). Standard library only; run against an
emulator (or any ES) on --url:

    ./target/release/scanstore-es-emulator --listen 127.0.0.1:19200 &
    python3 tests/python/refresh_cost.py --url http://127.0.0.1:19200 --docs 1000000 --pending 50000

A Lucene refresh costs what was buffered since the last one, whatever the index already
holds, so the two timings should be close.
"""
import argparse
import json
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:9200")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--pending", type=int, default=50_000)
    a = ap.parse_args()

    def req(method, path, body=None, ct="application/json"):
        r = urllib.request.Request(a.url + path, data=body, method=method,
                                   headers={"Content-Type": ct})
        with urllib.request.urlopen(r) as f:
            return json.loads(f.read() or b"null")

    def doc(i):
        return {"execution_id": "e1", "ip": "10.%d.%d.%d" % ((i >> 16) & 255, (i >> 8) & 255, i & 255),
                "port": 80, "service": "http", "banner": "b%d" % (i % 97),
                "observed_at": "2026-11-29T10:00:00Z"}

    def load(index, first, end):
        for s in range(first, end, 1000):
            lines = []
            for i in range(s, min(end, s + 1000)):
                lines.append(json.dumps({"index": {"_index": index, "_id": "d%d" % i}}))
                lines.append(json.dumps(doc(i)))
            req("POST", "/_bulk", ("\n".join(lines) + "\n").encode(), "application/x-ndjson")

    def refresh_ms(index):
        t = time.perf_counter()
        req("POST", "/%s/_refresh" % index)
        return (time.perf_counter() - t) * 1000

    mapping = {"settings": {"refresh_interval": "-1"},
               "mappings": {"properties": {"execution_id": {"type": "keyword"}, "ip": {"type": "ip"},
                                           "port": {"type": "integer"}, "service": {"type": "keyword"}}}}
    for index in ("refresh-cost-big", "refresh-cost-small"):
        req("PUT", "/" + index, json.dumps(mapping).encode())
    try:
        load("refresh-cost-big", 0, a.docs)
        refresh_ms("refresh-cost-big")
        load("refresh-cost-big", a.docs, a.docs + a.pending)
        big = refresh_ms("refresh-cost-big")
        load("refresh-cost-small", 0, a.pending)
        small = refresh_ms("refresh-cost-small")
        print("refresh of %d pending writes: %.1f ms in an index of %d documents, %.1f ms in an empty one"
              % (a.pending, big, a.docs, small))
    finally:
        for index in ("refresh-cost-big", "refresh-cost-small"):
            req("DELETE", "/" + index)


if __name__ == "__main__":
    main()
