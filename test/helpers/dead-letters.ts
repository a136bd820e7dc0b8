/** Reads a dead-letter store whole, for tests that count every dead letter of an endpoint. */
import type { DeadLetterRecord, DeadLetterStore } from '../../src/dead-letters/dead-letter-store.js';

/** Every dead letter of `endpoint` in `store`, page by page (500 a page). */
export async function allDeadLetters(store: DeadLetterStore, endpoint: string): Promise<DeadLetterRecord[]> {
  const records: DeadLetterRecord[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.list(
      { endpoint },
      cursor === undefined ? { limit: 500 } : { limit: 500, cursor },
    );
    records.push(...page.records);
    cursor = page.next;
  } while (cursor !== undefined);
  return records;
}
