// reuse: the statusq data, then EXPLAIN
