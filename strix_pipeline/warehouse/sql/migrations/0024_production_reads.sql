-- Schema v24: production as deployed. A baseline run whose settings were read from production says so
-- (runs.baseline_source: "production as deployed (sha256:<digest of the read>)"; NULL: the
-- configuration's). production_reads keeps each read of a host's production (`strix production show`,
-- a baseline run): its digest and what was read (JSON), so `strix doctor` can say when it changed.
ALTER TABLE runs ADD COLUMN baseline_source VARCHAR;
CREATE TABLE production_reads (
    host     VARCHAR NOT NULL,
    read_at  TIMESTAMPTZ NOT NULL,
    digest   VARCHAR NOT NULL,
    content  VARCHAR NOT NULL
);
