import type { PostgresTables } from './postgres-schema.js';

/**
 * Migration 9: the tables of `PostgresDeliveryLedger` and its admit function.
 *
 * @remarks
 * `ledger_claims` holds, per queue and message id, the publish token the queue delivers and where
 * its copy is (`active`: delivered and not settled, `waiting`: back in the queue, `done`: acked or
 * dead-lettered). `ledger_copies` holds the copies of messages published with a `deliverAt`,
 * `pending` until a receiver takes one (`taken`) or a cancel does (`cancelled`). A row past its
 * `expires_at` counts as absent and is pruned. `ledger_admit` is one call for a receiver's
 * decision: it locks the scheduled copy first (a cancel locks it too, so exactly one of them takes
 * it), then claims the id for the token with one upsert.
 */
export function deliveryLedgerMigrationSql(t: PostgresTables): string {
  return `
    CREATE TABLE IF NOT EXISTS ${t.ledgerClaims} (
      message_id text NOT NULL,
      queue text NOT NULL,
      token text NOT NULL,
      state text NOT NULL CHECK (state IN ('active', 'waiting', 'done')),
      expires_at bigint NOT NULL,
      PRIMARY KEY (message_id, queue)
    ) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
    CREATE INDEX IF NOT EXISTS ledger_claims_expires_at ON ${t.ledgerClaims} (expires_at);

    CREATE TABLE IF NOT EXISTS ${t.ledgerCopies} (
      message_id text NOT NULL,
      queue text NOT NULL,
      token text NOT NULL,
      state text NOT NULL CHECK (state IN ('pending', 'taken', 'cancelled')),
      deliver_at bigint NOT NULL,
      expires_at bigint NOT NULL,
      PRIMARY KEY (message_id, queue, token)
    );
    CREATE INDEX IF NOT EXISTS ledger_copies_expires_at ON ${t.ledgerCopies} (expires_at);

    ${ledgerAdmitFunctionSql(t, false)}
  `;
}

/**
 * The `ledger_admit` function: migration 9's, and migration 10's, which also records when the
 * claim was admitted (`admitted_at`, which `lost` checks).
 */
function ledgerAdmitFunctionSql(t: PostgresTables, withAdmittedAt: boolean): string {
  const admitted = withAdmittedAt
    ? { column: ', admitted_at', value: ', p_now', set: ', admitted_at = EXCLUDED.admitted_at' }
    : { column: '', value: '', set: '' };
  return `
    CREATE OR REPLACE FUNCTION ${t.ledgerAdmit}(
        p_queue text, p_message_id text, p_token text, p_now bigint, p_expires_at bigint)
      RETURNS text LANGUAGE plpgsql VOLATILE AS $admit$
      DECLARE
        copy_state text;
        verdict text;
      BEGIN
        SELECT s.state INTO copy_state FROM ${t.ledgerCopies} s
         WHERE s.message_id = p_message_id AND s.queue = p_queue AND s.token = p_token AND s.expires_at > p_now
         FOR UPDATE;
        IF copy_state = 'cancelled' THEN
          RETURN 'cancelled';
        ELSIF copy_state = 'pending' THEN
          UPDATE ${t.ledgerCopies} SET state = 'taken'
           WHERE message_id = p_message_id AND queue = p_queue AND token = p_token;
        END IF;
        INSERT INTO ${t.ledgerClaims} AS c (message_id, queue, token, state, expires_at${admitted.column})
          VALUES (p_message_id, p_queue, p_token, 'active', p_expires_at${admitted.value})
          ON CONFLICT (message_id, queue) DO UPDATE
            SET token = EXCLUDED.token, state = 'active', expires_at = EXCLUDED.expires_at${admitted.set}
            WHERE c.expires_at <= p_now OR (c.token = EXCLUDED.token AND c.state <> 'done')
          RETURNING 'deliver' INTO verdict;
        RETURN coalesce(verdict, 'duplicate');
      END
    $admit$;
  `;
}

/**
 * Migration 10's part on the claims: `admitted_at`, when a receiver last admitted the claim's
 * token, set by `ledger_admit` (cleared by a replace), so that a loss dropped before it is not
 * recorded.
 */
export function deliveryLedgerAdmittedAtSql(t: PostgresTables): string {
  return `
    ALTER TABLE ${t.ledgerClaims} ADD COLUMN IF NOT EXISTS admitted_at bigint;
    ${ledgerAdmitFunctionSql(t, true)}
  `;
}
