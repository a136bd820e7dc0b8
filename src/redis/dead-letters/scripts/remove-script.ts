import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { GROUP_AGGREGATES_LUA } from './group-aggregates-lua.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then the ids. Returns how many records
 * existed.
 */
export const REMOVE_SCRIPT = redisScript(`${GROUP_AGGREGATES_LUA}
local n = 0
for i = 2, #KEYS do
  n = n + deleteRecord(ARGV[1], KEYS[i], ARGV[i])
  redis.call('ZREM', KEYS[1], ARGV[i])
end
return n
`);

/** The run of {@link REMOVE_SCRIPT} that deletes the records `ids`, each id given once. */
export function removeScriptCall(keys: DeadLetterKeys, ids: readonly string[]): ScriptCall {
  return {
    script: REMOVE_SCRIPT,
    keys: [keys.index, ...ids.map((id) => keys.record(id))],
    args: [keys.scriptKeyspace, ...ids],
  };
}
