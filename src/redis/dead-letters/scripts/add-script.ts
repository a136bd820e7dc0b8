import type { DeadLetterRecord } from '../../../dead-letters/dead-letter-store.js';
import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { encodeGroupSample } from '../group-aggregates.js';
import { encodeReplays } from '../record-codec.js';
import { FILTER_FIELDS_LUA, filterFieldArgs } from './filter-fields-lua.js';
import { GROUP_AGGREGATES_LUA } from './group-aggregates-lua.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: record, index, sequence. ARGV: id, data, firstFailedAt, status, replays, maxRecords,
 * record key prefix, fingerprint, lastFailedAt, group sample JSON, keyspace, then the filter fields
 * endpoint, type, handler and reason (see FILTER_FIELDS_LUA). Returns the stored firstFailedAt,
 * status and replays.
 */
export const ADD_SCRIPT = redisScript(`${GROUP_AGGREGATES_LUA}${FILTER_FIELDS_LUA}
local K = ARGV[11]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first')
  unindexGroup(K, ARGV[1], old[1], old[2])
  redis.call('HSET', KEYS[1], 'data', ARGV[2], 'status', 'dead', 'fp', ARGV[8], 'last', ARGV[9])
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  indexGroup(K, ARGV[1], ARGV[8], 'dead', old[3], ARGV[9])
  redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
  setFilterFields(KEYS[1], 12)
  return redis.call('HMGET', KEYS[1], 'first', 'status', 'replays')
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'first', ARGV[3], 'status', ARGV[4], 'replays', ARGV[5], 'v', 1, 'fp', ARGV[8], 'last', ARGV[9])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
setFilterFields(KEYS[1], 12)
indexGroup(K, ARGV[1], ARGV[8], ARGV[4], ARGV[3], ARGV[9])
redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6])
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) do
    deleteRecord(K, ARGV[7] .. old, old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
end
return {ARGV[3], ARGV[4], ARGV[5]}
`);

/**
 * The run of {@link ADD_SCRIPT} that stores `record`, `data` being its `data` field (see
 * encodeRecordData), and drops the oldest records past `maxRecords`.
 */
export function addScriptCall(
  keys: DeadLetterKeys,
  record: DeadLetterRecord,
  data: string,
  maxRecords: number,
): ScriptCall {
  return {
    script: ADD_SCRIPT,
    keys: [keys.record(record.id), keys.index, keys.seq],
    args: [
      record.id,
      data,
      String(record.firstFailedAt),
      record.status,
      encodeReplays(record.replays),
      String(maxRecords),
      keys.scriptRecordPrefix,
      record.fingerprint,
      String(record.lastFailedAt),
      encodeGroupSample(record),
      keys.scriptKeyspace,
      ...filterFieldArgs(record),
    ],
  };
}
