#!/usr/bin/env python3
"""Peer check: the official Python `elasticsearch` 8.x client against an ES endpoint.

Usage: es_peer_check.py URL
With security on, ES_API_KEY (the encoded key) and ES_CA_FILE (a PEM bundle) give the
credentials and the CA to verify an https:// URL against. Creates an index, bulk-loads, refreshes, counts and pages a composite aggregation, asserting
every result. Exits 0 on success, 1 on a failed assertion, 2 if the client is missing.
"""
import os
import sys
import uuid

try:
    from elasticsearch import Elasticsearch, helpers
except ImportError as exc:  # pragma: no cover - reported to the Rust test
    print(f"elasticsearch package missing: {exc}", file=sys.stderr)
    sys.exit(2)


def main(url: str) -> None:
    es = Elasticsearch(
        url,
        request_timeout=30,
        api_key=os.environ.get("ES_API_KEY") or None,
        ca_certs=os.environ.get("ES_CA_FILE") or None,
    )
    info = es.info()
    assert info["version"]["number"].startswith(("7.", "8.")), info
    # STORAGE_TEST_ES_PREFIX: the test run's own names on a shared cluster.
    index = os.environ.get("STORAGE_TEST_ES_PREFIX", "") + f"peer-check-{uuid.uuid4().hex[:12]}"
    es.indices.create(
        index=index,
        settings={"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"},
        mappings={
            "dynamic": "strict",
            "properties": {
                "ip": {"type": "ip"},
                "port": {"type": "long"},
                "host": {"type": "keyword"},
                "execution_id": {"type": "keyword"},
            },
        },
    )
    try:
        docs = [
            {"_index": index, "_id": f"d{i}", "_source": {
                "ip": f"10.0.{i % 3}.{i}", "port": 80 + (i % 4), "host": f"h{i % 5}", "execution_id": "e1" if i < 30 else "e2"}}
            for i in range(40)
        ]
        ok, errors = helpers.bulk(es, docs, raise_on_error=False)
        assert ok == 40 and not errors, (ok, errors)
        # Not visible before a refresh (refresh_interval -1).
        assert es.count(index=index)["count"] == 0
        refreshed = es.indices.refresh(index=index)
        assert refreshed["_shards"]["failed"] == 0, refreshed
        assert es.count(index=index)["count"] == 40
        assert es.count(index=index, query={"term": {"execution_id": "e1"}})["count"] == 30
        # Page a composite aggregation to the end.
        pairs, after = [], None
        while True:
            composite = {"size": 7, "sources": [{"host": {"terms": {"field": "host"}}}, {"port": {"terms": {"field": "port"}}}]}
            if after:
                composite["after"] = after
            resp = es.search(index=index, size=0, track_total_hits=False, aggs={"pairs": {"composite": composite}})
            agg = resp["aggregations"]["pairs"]
            if not agg["buckets"]:
                assert "after_key" not in agg
                break
            pairs += [(b["key"]["host"], b["key"]["port"], b["doc_count"]) for b in agg["buckets"]]
            after = agg["after_key"]
        assert sum(c for _, _, c in pairs) == 40, pairs
        assert pairs == sorted(pairs), pairs
        assert len(pairs) == len({(h, p) for h, p, _ in pairs}) == 20, pairs
    finally:
        es.indices.delete(index=index)
    print("es_peer_check: ok")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: es_peer_check.py URL", file=sys.stderr)
        sys.exit(64)
    try:
        main(sys.argv[1])
    except AssertionError as exc:
        print(f"es_peer_check: assertion failed: {exc!r}", file=sys.stderr)
        sys.exit(1)
