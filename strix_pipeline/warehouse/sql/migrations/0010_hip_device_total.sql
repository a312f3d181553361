-- Schema v10: the Box's memory limits as the run met them (issue 27): the device total as HIP sees it
-- (the KFD topology's GPU node, what vLLM's and SGLang's fractions are of) and the DKMS driver's amdttm
-- pages_limit beside ttm's (ttm_pages_limit is the one in force: amdttm's when it is loaded).
-- NULL: a host without a KFD GPU node or without amdttm, a local host, older runs.
ALTER TABLE runs ADD COLUMN hip_device_total_bytes BIGINT;
ALTER TABLE runs ADD COLUMN amdttm_pages_limit BIGINT;
