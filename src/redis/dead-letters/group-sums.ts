import { comesAfter, encodeGroupCursor, type GroupCursor } from '../../dead-letters/dead-letter-groups.js';
import type { DeadLetterGroup, DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';

/** The record shown for a group: the latest by sequence, read at the end unless already at hand. */
export interface SampleRef {
  readonly seq: number;
  readonly id: string;
  readonly record?: DeadLetterRecord;
}

/** One fingerprint's selected records, summed. */
export interface GroupSum {
  readonly fingerprint: string;
  readonly count: number;
  readonly firstSeen: number;
  readonly lastSeen: number;
  readonly sample: SampleRef;
}

/** Groups order: lastSeen descending, then fingerprint descending. */
function byLastSeen(a: GroupCursor, b: GroupCursor): number {
  if (a.lastSeen !== b.lastSeen) return b.lastSeen - a.lastSeen;
  return a.fingerprint < b.fingerprint ? 1 : a.fingerprint > b.fingerprint ? -1 : 0;
}

/** Merges the per-chunk sums of a filter scan into failure groups. */
export class GroupSums {
  readonly #sums = new Map<string, GroupSum>();

  add(sum: GroupSum): void {
    const old = this.#sums.get(sum.fingerprint);
    if (old === undefined) {
      this.#sums.set(sum.fingerprint, sum);
      return;
    }
    this.#sums.set(sum.fingerprint, {
      fingerprint: sum.fingerprint,
      count: old.count + sum.count,
      firstSeen: Math.min(old.firstSeen, sum.firstSeen),
      lastSeen: Math.max(old.lastSeen, sum.lastSeen),
      sample: sum.sample.seq >= old.sample.seq ? sum.sample : old.sample,
    });
  }

  addRecord(record: DeadLetterRecord, seq: number): void {
    this.add({
      fingerprint: record.fingerprint,
      count: 1,
      firstSeen: record.firstFailedAt,
      lastSeen: record.lastFailedAt,
      sample: { seq, id: record.id, record },
    });
  }

  /** The page of groups after `after`, in groups order. */
  page(after: GroupCursor | undefined, limit: number): { groups: GroupSum[]; next: string | undefined } {
    const selectedGroups = [...this.#sums.values()]
      .filter((sum) => after === undefined || comesAfter(sum, after))
      .sort(byLastSeen);
    const groups = selectedGroups.slice(0, limit);
    const last = groups.at(-1);
    return {
      groups,
      next: selectedGroups.length > limit && last !== undefined ? encodeGroupCursor(last) : undefined,
    };
  }
}

/** A group as the store answers it, described by its sample record (empty when that vanished). */
export function groupWithSample(sum: GroupSum, sample: DeadLetterRecord | undefined): DeadLetterGroup {
  return {
    fingerprint: sum.fingerprint,
    count: sum.count,
    firstSeen: sum.firstSeen,
    lastSeen: sum.lastSeen,
    ...(sample?.type !== undefined ? { type: sample.type } : {}),
    ...(sample?.handler !== undefined ? { handler: sample.handler } : {}),
    ...(sample !== undefined ? { endpoint: sample.endpoint } : {}),
    reason: sample?.reason ?? '',
    sampleError: sample?.error.message ?? '',
  };
}
