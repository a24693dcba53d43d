-- +goose Up
-- Effects by the provider's reference (a Stripe pi_/re_/ch_ id, a SendGrid
-- X-Message-Id): the web view's search box and outboxctl's effect
-- arguments find the effect behind an id a customer or the provider's
-- dashboard gives.
--
-- The reference is written when an effect is confirmed, a transition that
-- changes phase and so already writes an entry in every index of the row
-- (it is never a HOT update); the reference is never written by a claim,
-- which stays HOT. So this index costs one more entry per confirmation
-- with a reference, and none for a webhook, whose confirmations carry none
-- (measured in docs/performance.md, "Provider references").
--
-- On a large table, build it beforehand without blocking writes:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS side_effects_provider_ref_idx
--       ON <schema>.side_effects (provider_ref) WHERE provider_ref IS NOT NULL;
-- and this migration keeps it.
CREATE INDEX IF NOT EXISTS side_effects_provider_ref_idx ON side_effects (provider_ref)
    WHERE provider_ref IS NOT NULL;

-- +goose Down
DROP INDEX side_effects_provider_ref_idx;
