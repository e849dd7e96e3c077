"""The runs explorer's merge of index pages (worker/ops/runs.py): with no index of all events (issue 29), an
unfiltered page merges the status indexes as it merges the buckets'."""

from __future__ import annotations

from worker.keys.layout import Keys
from worker.ops.runs import RunQuery, _merged, status_indexes

TENANT = Keys("p:", "t", 2)


def test_an_unfiltered_query_walks_every_status_index_of_every_bucket() -> None:
    """Five status indexes per bucket, the scope filter its scope's bucket's one index."""
    bucket = TENANT.every_bucket()[0]
    assert RunQuery().indexes(bucket) == status_indexes(bucket)
    assert len(status_indexes(bucket)) == 5 and bucket.runs("status", "done") in status_indexes(bucket)
    assert RunQuery(status="queued").indexes(bucket) == [bucket.runs("status", "active")]


def test_pages_merge_newest_first_and_an_event_seen_in_two_status_indexes_is_listed_once() -> None:
    """An event that moved from active to done between the two pages' reads appears in both: listed once;
    the same id in another bucket is another event and kept."""
    b0, b1 = TENANT.every_bucket()
    active, done = b0.runs("status", "active"), b0.runs("status", "done")
    pages = [["e3", "30", "e1", "10"], ["e3", "30", "e2", "20"], ["e3", "30"]]
    merged, full = _merged([(b0, active), (b0, done), (b1, b1.runs("status", "done"))], pages, 50)
    assert [(e[0], e[1], e[2].bucket_prefix) for e in merged] == [
        ("e3", 30, b0.bucket_prefix),
        ("e3", 30, b1.bucket_prefix),
        ("e2", 20, b0.bucket_prefix),
        ("e1", 10, b0.bucket_prefix),
    ]
    assert not full
