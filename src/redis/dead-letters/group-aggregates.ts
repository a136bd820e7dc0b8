import type {
  DeadLetterFilter,
  DeadLetterGroup,
  DeadLetterGroupPage,
  DeadLetterRecord,
} from '../../dead-letters/dead-letter-store.js';
import { encodeGroupCursor } from '../../dead-letters/dead-letter-groups.js';

// The failure-group aggregates as Node writes and reads them. The scripts keep them beside each
// record (GROUP_AGGREGATES_LUA), so that a filter of status and fingerprint alone is answered without
// reading records; group-sums.ts builds groups when a filter needs a scan instead.

/** The fields a group shows, kept beside its aggregates as JSON. */
interface GroupSample {
  readonly type?: string;
  readonly handler?: string;
  readonly endpoint?: string;
  readonly reason?: string;
  readonly sampleError?: string;
}

/** The JSON kept as `group:sample:<fp>`, from the latest record of the group. */
export function encodeGroupSample(record: DeadLetterRecord): string {
  const sample: GroupSample = {
    ...(record.type !== undefined ? { type: record.type } : {}),
    ...(record.handler !== undefined ? { handler: record.handler } : {}),
    endpoint: record.endpoint,
    reason: record.reason,
    sampleError: record.error.message,
  };
  return JSON.stringify(sample);
}

/**
 * The statuses whose aggregates answer `filter` (space separated, as the scripts read them), or
 * undefined when it sets a field other than status and fingerprint, which only a scan can answer.
 */
export function aggregatedStatuses(filter: DeadLetterFilter): string | undefined {
  const { status = 'dead', fingerprint: _fingerprint, ...rest } = filter;
  // Checked at run time: a caller from JavaScript may spell an unset field as undefined.
  const others: readonly unknown[] = Object.values(rest);
  if (others.some((value) => value !== undefined)) return undefined;
  return status === 'any' ? 'dead replayed' : status;
}

/** A page of groups from the groups script's reply (five values per group, at most limit + 1 groups). */
export function decodeGroupsPage(reply: readonly unknown[], limit: number): DeadLetterGroupPage {
  const groups: DeadLetterGroup[] = [];
  for (let i = 0; i + 5 <= reply.length; i += 5) {
    const [fingerprint, count, first, last, json] = reply.slice(i, i + 5);
    const sample = JSON.parse(String(json)) as GroupSample;
    groups.push({
      fingerprint: String(fingerprint),
      count: Number(count),
      firstSeen: Number(first),
      lastSeen: Number(last),
      ...(sample.type !== undefined ? { type: sample.type } : {}),
      ...(sample.handler !== undefined ? { handler: sample.handler } : {}),
      ...(sample.endpoint !== undefined ? { endpoint: sample.endpoint } : {}),
      reason: sample.reason ?? '',
      sampleError: sample.sampleError ?? '',
    });
  }
  const page = groups.slice(0, limit);
  const last = page.at(-1);
  return {
    groups: page,
    next: groups.length > limit && last !== undefined ? encodeGroupCursor(last) : undefined,
  };
}
