import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { GROUP_AGGREGATES_LUA } from './group-aggregates-lua.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then id and version pairs. Deletes each
 * record still at the version that was read; returns how many it deleted.
 */
export const PURGE_SCRIPT = redisScript(`${GROUP_AGGREGATES_LUA}
local n = 0
for i = 2, #KEYS do
  local id = ARGV[2 * i - 2]
  if redis.call('HGET', KEYS[i], 'v') == ARGV[2 * i - 1] then
    deleteRecord(ARGV[1], KEYS[i], id)
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
return n
`);

/** The run of {@link PURGE_SCRIPT} that deletes each record of `doomed` still at the version read. */
export function purgeScriptCall(
  keys: DeadLetterKeys,
  doomed: readonly { readonly id: string; readonly version: string }[],
): ScriptCall {
  return {
    script: PURGE_SCRIPT,
    keys: [keys.index, ...doomed.map((entry) => keys.record(entry.id))],
    args: [keys.scriptKeyspace, ...doomed.flatMap((entry) => [entry.id, entry.version])],
  };
}
