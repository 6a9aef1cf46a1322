-- A character's hunger (0 = fed), so a player who logs out starving comes
-- back starving. Existing characters start fed.

ALTER TABLE characters ADD COLUMN hunger BIGINT NOT NULL DEFAULT 0;
