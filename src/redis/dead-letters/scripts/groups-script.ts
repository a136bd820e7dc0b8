import type { GroupCursor } from '../../../dead-letters/dead-letter-groups.js';
import type { DeadLetterFilter } from '../../../dead-letters/dead-letter-store.js';
import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: index, groups index of the state asked for. ARGV: keyspace, statuses to sum (space
 * separated), max score ('+inf' or the cursor's lastSeen), cursor fingerprint ('' for none), limit,
 * fingerprint filter ('' for none). Returns {ready, then per group: fp, count, firstSeen, lastSeen,
 * sample JSON}, at most limit + 1 groups; ready is 0 when records without aggregates exist.
 */
export const GROUPS_SCRIPT = redisScript(`
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return {0} end
local statuses = {}
for status in string.gmatch(ARGV[2], '%S+') do statuses[#statuses + 1] = status end
local limit = tonumber(ARGV[5])
local out = {1}
local found = 0
local function emit(fp, score)
  local count, first = 0, nil
  for _, status in ipairs(statuses) do
    count = count + redis.call('ZCARD', K .. 'group:' .. status .. ':last:' .. fp)
    local low = redis.call('ZRANGE', K .. 'group:' .. status .. ':first:' .. fp, 0, 0, 'WITHSCORES')
    if low[2] and (first == nil or tonumber(low[2]) < tonumber(first)) then first = low[2] end
  end
  out[#out + 1] = fp
  out[#out + 1] = count
  out[#out + 1] = first or score
  out[#out + 1] = score
  out[#out + 1] = redis.call('GET', K .. 'group:sample:' .. fp) or '{}'
  found = found + 1
end
-- Whether a group sorts after the cursor (newest lastSeen first, then by fingerprint).
local function afterCursor(fp, score)
  if ARGV[3] == '+inf' then return true end
  local s, max = tonumber(score), tonumber(ARGV[3])
  if s ~= max then return s < max end
  return ARGV[4] == '' or fp < ARGV[4]
end
if ARGV[6] ~= '' then
  -- One fingerprint is one member: a lookup, where walking the set would cost every group.
  local score = redis.call('ZSCORE', KEYS[2], ARGV[6])
  if score and afterCursor(ARGV[6], score) then emit(ARGV[6], score) end
  return out
end
local offset = 0
while found <= limit do
  local chunk = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', offset, 200)
  if #chunk == 0 then break end
  offset = offset + #chunk / 2
  for i = 1, #chunk, 2 do
    local fp, score = chunk[i], chunk[i + 1]
    local skip = ARGV[4] ~= '' and tonumber(score) == tonumber(ARGV[3]) and fp >= ARGV[4]
    if not skip and found <= limit then emit(fp, score) end
  end
end
return out
`);

/**
 * The run of {@link GROUPS_SCRIPT} that reads the page of `limit` groups after `after` that
 * `filter` selects, summing `statuses` (see aggregatedStatuses).
 */
export function groupsScriptCall(
  keys: DeadLetterKeys,
  filter: DeadLetterFilter,
  statuses: string,
  after: GroupCursor | undefined,
  limit: number,
): ScriptCall {
  return {
    script: GROUPS_SCRIPT,
    keys: [keys.index, keys.groups(filter.status ?? 'dead')],
    args: [
      keys.scriptKeyspace,
      statuses,
      after === undefined ? '+inf' : String(after.lastSeen),
      after?.fingerprint ?? '',
      String(limit),
      filter.fingerprint ?? '',
    ],
  };
}
