"""Unit tests of the operator views (worker/ops/): the runs explorer's merge of index pages."""
