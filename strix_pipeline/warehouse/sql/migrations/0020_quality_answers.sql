-- Schema v20: correctness, measured. Every run answers the project's fixed evaluation set
-- (strix_pipeline/quality/items.py), one row per item: the set's version (a digest of its items, so
-- scores compare only on the same set), whether the answer passed its check, and the answer's first line.
CREATE TABLE quality_answers (
    run_id VARCHAR NOT NULL,
    set_version VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    passed BOOLEAN NOT NULL,
    answer VARCHAR NOT NULL
);
