"""The runs explorer's merge of index pages (worker/ops/runs.py): with no index of all events and none of done
events (issue 29), an unfiltered page merges the type and status indexes as it merges the buckets'."""

from __future__ import annotations

from worker.keys.layout import Keys
from worker.ops.runs import RunQuery, _merged, every_index, status_indexes, type_indexes

TENANT = Keys("p:", "t", 2)


def test_an_unfiltered_query_walks_the_type_and_status_indexes_and_done_the_type_indexes() -> None:
    """No status index of done events: done walks the registry's type indexes (and the done index written
    before, until it expires); unfiltered adds the four status indexes; a status other than done is one index."""
    bucket = TENANT.every_bucket()[0]
    types = ["a.b", "c.d"]
    by_type = [bucket.runs("type", "a.b"), bucket.runs("type", "c.d"), bucket.runs("status", "done")]
    assert RunQuery(status="done").indexes(bucket, types) == type_indexes(bucket, types) == by_type
    assert RunQuery().indexes(bucket, types) == every_index(bucket, types) == by_type + status_indexes(bucket)
    assert len(status_indexes(bucket)) == 4 and bucket.runs("status", "done") not in status_indexes(bucket)
    assert RunQuery(status="queued").indexes(bucket) == [bucket.runs("status", "active")]
    assert RunQuery(status="done").walks_types and RunQuery().walks_types
    assert (
        not RunQuery(status="dead").walks_types and not RunQuery(status="done", source_type="a.b").walks_types
    )


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
