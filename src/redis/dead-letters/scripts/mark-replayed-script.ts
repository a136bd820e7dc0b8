import { MAX_REPLAY_HISTORY, type ReplayRecord } from '../../../dead-letters/dead-letter-store.js';
import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { encodeReplay } from '../record-codec.js';
import { GROUP_AGGREGATES_LUA } from './group-aggregates-lua.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: record. ARGV: replay entry JSON, most entries kept, id, keyspace. Returns 1, or 0 when there
 * is no record.
 */
export const MARK_REPLAYED_SCRIPT = redisScript(`${GROUP_AGGREGATES_LUA}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local entries = {}
for entry in string.gmatch(redis.call('HGET', KEYS[1], 'replays') or '', '[^\\n]+') do
  entries[#entries + 1] = entry
end
entries[#entries + 1] = ARGV[1]
local from = math.max(1, #entries - tonumber(ARGV[2]) + 1)
local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first', 'last')
redis.call('HSET', KEYS[1], 'status', 'replayed', 'replays', table.concat(entries, '\\n', from))
redis.call('HINCRBY', KEYS[1], 'v', 1)
if old[1] and old[2] ~= 'replayed' then
  unindexGroup(ARGV[4], ARGV[3], old[1], old[2])
  indexGroup(ARGV[4], ARGV[3], old[1], 'replayed', old[3], old[4])
end
return 1
`);

/** The run of {@link MARK_REPLAYED_SCRIPT} that records `replay` on the record `id`. */
export function markReplayedScriptCall(keys: DeadLetterKeys, id: string, replay: ReplayRecord): ScriptCall {
  return {
    script: MARK_REPLAYED_SCRIPT,
    keys: [keys.record(id)],
    args: [encodeReplay(replay), String(MAX_REPLAY_HISTORY), id, keys.scriptKeyspace],
  };
}
