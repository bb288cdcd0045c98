-- Idempotency keys are kept for 24 hours: the housekeeping task deletes older ones by age.
CREATE INDEX idempotency_by_age ON idempotency (created_at);
