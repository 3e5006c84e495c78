-- Columns added to topups after its first release: the offer bought and
-- what it cost (the family app's top-ups are the operator's offers, billed
-- to the phone bill). offer_id is '' for the back office's top-ups outside
-- the offers (no price); price_krw includes VAT, vat_krw is its VAT at
-- vat_rate percent (the operator's DPCS_VAT_RATE when it was bought).
ALTER TABLE topups ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';
ALTER TABLE topups ADD COLUMN price_krw INTEGER NOT NULL DEFAULT 0;
ALTER TABLE topups ADD COLUMN vat_krw INTEGER NOT NULL DEFAULT 0;
ALTER TABLE topups ADD COLUMN vat_rate INTEGER NOT NULL DEFAULT 0;
