import type { DeadLetterFilter } from '../../../dead-letters/dead-letter-store.js';
import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: index. ARGV: keyspace, statuses to sum (space separated), fingerprint ('' for all), then the
 * lowest and highest lastFailedAt (ZCOUNT syntax; the group sets are scored by it). Returns the
 * number of records, or -1 when records without aggregates exist.
 */
export const COUNT_SCRIPT = redisScript(`
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return -1 end
local n = 0
for status in string.gmatch(ARGV[2], '%S+') do
  if ARGV[3] ~= '' then
    n = n + redis.call('ZCOUNT', K .. 'group:' .. status .. ':last:' .. ARGV[3], ARGV[4], ARGV[5])
  else
    for _, fp in ipairs(redis.call('ZRANGE', K .. 'groups:' .. status, 0, -1)) do
      n = n + redis.call('ZCOUNT', K .. 'group:' .. status .. ':last:' .. fp, ARGV[4], ARGV[5])
    end
  end
end
return n
`);

/**
 * The run of {@link COUNT_SCRIPT} that counts the records `filter` selects, summing `statuses` (see
 * aggregatedStatuses).
 */
export function countScriptCall(
  keys: DeadLetterKeys,
  filter: DeadLetterFilter,
  statuses: string,
): ScriptCall {
  return {
    script: COUNT_SCRIPT,
    keys: [keys.index],
    args: [
      keys.scriptKeyspace,
      statuses,
      filter.fingerprint ?? '',
      filter.since === undefined ? '-inf' : String(filter.since),
      filter.until === undefined ? '+inf' : `(${filter.until}`,
    ],
  };
}
