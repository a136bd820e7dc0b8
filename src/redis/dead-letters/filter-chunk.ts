import type { DeadLetterFilter, DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';
import { matchesDeadLetterFilter } from '../../dead-letters/matches-dead-letter-filter.js';
import { decodeChunkEntries, type ChunkEntry } from './chunk-entries.js';
import type { DeadLetterKeys } from './dead-letter-keys.js';
import type { GroupSum } from './group-sums.js';
import { RECORD_FIELDS } from './record-codec.js';

/** A record the filter scan returned: selected by the script, or a candidate the caller must judge. */
export interface FilterEntry extends ChunkEntry {
  readonly record: DeadLetterRecord;
  readonly verdict: 'selected' | 'candidate';
}

/** One run of the filter scan, decoded. */
export interface FilterChunk {
  /** Index entries read. */
  readonly read: number;
  /** Sequence of the last entry read, where the next run starts; undefined when none was read. */
  readonly last: number | undefined;
  /** Whether the index has nothing after `last`. */
  readonly ended: boolean;
  /** Records selected and counted by the script, not returned (`count` and `groups` modes). */
  readonly selected: number;
  readonly entries: readonly FilterEntry[];
  /** Per-fingerprint sums of the selected records not returned (`groups` mode). */
  readonly groups: readonly GroupSum[];
}

/** Whether the filter selects an entry the scan returned: the script said so, or the filter says so here. */
export function isSelected(entry: FilterEntry, filter: DeadLetterFilter): boolean {
  return entry.verdict === 'selected' || matchesDeadLetterFilter(entry.record, filter);
}

/** A filter scan script's reply, decoded (see FILTER_SCAN_SCRIPT for its layout). */
export function decodeFilterChunk(reply: unknown, keys: DeadLetterKeys): FilterChunk {
  const [read, last, ended, selectedCount, records, groups] = reply as [
    number,
    unknown,
    number,
    number,
    unknown[],
    unknown[],
  ];
  const width = 3 + RECORD_FIELDS.length;
  const entries: FilterEntry[] = [];
  for (let i = 0; i + width <= records.length; i += width) {
    const [entry] = decodeChunkEntries(
      [records[i], records[i + 1], ...records.slice(i + 3, i + width)],
      keys,
    );
    if (entry?.record !== undefined) {
      entries.push({
        ...entry,
        record: entry.record,
        verdict: records[i + 2] === 1 ? 'selected' : 'candidate',
      });
    }
  }
  const sums: GroupSum[] = [];
  for (let i = 0; i + 6 <= groups.length; i += 6) {
    const [fingerprint, count, first, lastSeen, seq, id] = groups.slice(i, i + 6);
    sums.push({
      fingerprint: String(fingerprint),
      count: Number(count),
      firstSeen: Number(first),
      lastSeen: Number(lastSeen),
      sample: { seq: Number(seq), id: String(id) },
    });
  }
  return {
    read,
    last: typeof last === 'string' ? Number(last) : undefined,
    ended: ended === 1,
    selected: selectedCount,
    entries,
    groups: sums,
  };
}
