import type { DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';
import type { DeadLetterKeys } from './dead-letter-keys.js';
import { decodeRecord, RECORD_FIELDS } from './record-codec.js';

/** One index entry as read back, with its record unless it vanished between writes. */
export interface ChunkEntry {
  readonly id: string;
  readonly seq: number;
  readonly record: DeadLetterRecord | undefined;
  readonly version: string | undefined;
}

/** The entries of a chunk script's reply: id, score, then the record's fields, per entry. */
export function decodeChunkEntries(reply: readonly unknown[], keys: DeadLetterKeys): ChunkEntry[] {
  // A missing field comes back as nil over RESP2 but may come back as false over RESP3.
  const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
  const width = 2 + RECORD_FIELDS.length;
  const entries: ChunkEntry[] = [];
  for (let i = 0; i + width <= reply.length; i += width) {
    const [id, score, data, first, status, replays, version] = reply.slice(i, i + width).map(text);
    if (id === undefined || score === undefined) continue;
    const key = keys.record(id);
    entries.push({
      id,
      seq: Number(score),
      record:
        data === undefined
          ? undefined
          : decodeRecord(key, data, first ?? '0', status ?? 'dead', replays ?? ''),
      version,
    });
  }
  return entries;
}
